// SPDX-License-Identifier: MIT
#pragma once
// What one dataset item's protocols found, as values: runItem fills these, the ledger stores each
// protocol's part as one JSON row and reads it back into them, and the report, the audit and the
// GUI read fields, never JSON paths. The JSON form (toJson) is the ledger's schema: its keys are
// fixed by schema version 1 and by the comparison fingerprint every stored item carries, so a value
// read from a ledger and written again gives the same bytes (tests/experiments pins both).
#include "core/cache/kv_parts.h"
#include "core/decode/stop_reason.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::experiments {

enum class ItemStatus {
    Done,        // the trace reached its stage boundary; the protocols ran
    NoBoundary,  // the trace never reached it: only the trace is recorded
};
std::string itemStatusName(ItemStatus status);  // "done" | "no_boundary" (the ledger's spelling)
ItemStatus parseItemStatus(const std::string& name, const std::string& where);  // FormatError naming `where`

// The decoded trace and where its stage boundary fell.
struct TraceResult {
    int64_t length = 0;
    StopReason stopReason = StopReason::MaxNewTokens;
    std::optional<int64_t> boundary;  // tokens of the trace in the prefix; none: no boundary
};

// One decode step where two continuations first differ.
struct StepSummary {
    int64_t id = 0;
    double margin = 0, entropy = 0, logprob = 0;  // NaN where the ledger holds null
};

// matched: the live cache's continuation against the one-shot prefill's, with replicas.
struct MatchedResult {
    bool suffixEqual = true;
    std::optional<int64_t> firstDivergence;                      // none when the suffixes are equal
    std::optional<StepSummary> liveAtDivergence, prefillAtDivergence;  // none past a suffix's end
    bool replicaLiveExact = true, replicaPrefillExact = true;
    std::optional<std::string> answerLive, answerPrefill;        // none: no answer extracted
    bool correctLive = false, correctPrefill = false;
    int64_t suffixLengthLive = 0, suffixLengthPrefill = 0;
    std::vector<double> marginsLive;                             // top-1 minus top-2 logit per live step
    bool labelFlipped() const { return correctLive != correctPrefill; }
};

// fixed_prefix_2x2: incremental against prefill continuations of one prefix, in one precision.
struct FixedPrefixCell {
    bool disagree = false;
    std::optional<int64_t> firstDivergence;
};
struct FixedPrefixResult {
    std::map<std::string, FixedPrefixCell> byPrecision;  // precision name ("bf16", "layercast", ...) -> cell
};

struct BridgeResult {
    bool exact = false;                       // the rebuilt cache carries the live cache's fingerprint
    std::optional<std::string> construction;  // how it was rebuilt; ledgers before the remedy lack it
};

struct TransplantVerdict {
    bool followsDonor = false, followsRecipient = false;
};
struct TransplantResult {
    std::string layers;  // the run's [transplant] layers, as written there
    KvParts parts = KvParts::Both;
    TransplantVerdict prefillFromLive, liveFromPrefill;
};

struct LocalizeResult {
    bool found = false;
    std::vector<int64_t> layers;  // the smallest sufficient contiguous range, when found
    KvParts parts = KvParts::Both;  // which of the range's tensors suffice, when found
    int64_t tests = 0;            // transplants tried
};

struct AuditResult {
    bool reproduced = false;
    std::vector<std::string> mismatches;
};

// An imported trajectory's record of the engine that generated it (kvscope import): what the engine
// said of its own tokens. Its tokens are the item's "prompt" and "output" trajectories.
struct EngineRecord {
    std::string engine, dtype;
    std::optional<int64_t> batchSize;
    std::optional<double> temperature;
    std::optional<std::string> answer;
    std::optional<std::vector<double>> logprobs;  // the engine's log-probability of each output token
    using TopEntries = std::vector<std::pair<int64_t, double>>;  // (id, logprob), as the engine listed them
    std::optional<std::vector<TopEntries>> topLogprobs;
};

// One teacher-forced replay of an imported trajectory (kvscope replay), per output token: the
// replay's log-probability of the engine's token, its own argmax there, top-1 minus top-2 logit, and
// the engine token's rank (1 = the argmax).
struct ReplayResult {
    std::vector<double> logprobs, margins;
    std::vector<int64_t> argmaxes, ranks;
};

// batch: the item's prompt decoded greedily alone (a batch of 1) and as the first row of a
// left-padded batch of another size, its fillers the dataset's next items; one cell per size.
struct BatchCell {
    bool logitsEqual = true;  // the item's logits at every step up to the first divergence bit-equal to alone
    bool cacheEqual = true;   // the prompt's K/V in the item's row bit-equal to alone's after the prefill
    std::optional<int64_t> firstDivergence;    // the first generated step whose greedy token differs
    std::optional<double> marginAtDivergence;  // alone's top-1 minus top-2 logit there
    // Where logits differ: that step's first op whose item row differs, "step K, layer L OP" (step 0:
    // the prefill; "logits" and "final_norm" are the head's)
    std::optional<std::string> firstDifferingOp;
};
struct BatchResult {
    std::map<std::string, std::map<int64_t, BatchCell>> byKernels;  // "torch" | "invariant" -> size -> cell
};
// The item's trajectory that holds its greedy continuation in a batch of `size` with `kernels`
// ("torch" | "invariant"), size 1 the item alone: "batch/torch/8".
std::string batchContinuationName(const std::string& kernels, int64_t size);

// Every protocol's part, present where the protocol ran for the item.
struct ItemResults {
    std::optional<TraceResult> trace;
    std::optional<MatchedResult> matched;
    std::optional<FixedPrefixResult> fixedPrefix2x2;
    std::optional<BridgeResult> bridge;
    std::optional<TransplantResult> transplant;
    std::optional<LocalizeResult> localize;
    std::optional<AuditResult> audit;
    std::optional<BatchResult> batch;
    std::map<std::string, std::string> caches;  // construction -> saved cache file (--keep-caches)
    std::optional<EngineRecord> engine;          // imported trajectories only
    std::map<std::string, ReplayResult> replays;  // replay label ("prefill/torch/bf16") -> its tokens

    bool divergent() const { return matched && !matched->suffixEqual; }
    std::vector<std::string> protocols() const;  // the ledger names of the parts present, "trace" included
};

// An item's token ids, by what they are. The ledger keeps each under its name (in parentheses), and
// the comparison fingerprint hashes them as one {name: ids} object (byName), so the names are fixed.
struct Trajectories {
    using Ids = std::vector<int64_t>;
    std::optional<Ids> prompt;         // "prompt": the ids the model read first (a study's or an import's)
    std::optional<Ids> trace;          // "trace": a study's decode from the prompt
    std::optional<Ids> suffixLive;     // "suffix_live": the continuation from the boundary's live cache
    std::optional<Ids> suffixPrefill;  // "suffix_prefill": the continuation from its one-shot prefill
    std::optional<Ids> output;         // "output": an imported trajectory's output tokens
    std::map<std::string, Ids> batch;  // batchContinuationName(kernels, size) -> the batch protocol's continuation

    std::map<std::string, Ids> byName() const;  // those present, by their ledger names
    // Stores `ids` as the trajectory the ledger's `name` stands for; false for a name that is none.
    bool set(const std::string& name, Ids ids);
    const Ids* find(const std::string& name) const;  // present under that name, or null
    bool operator==(const Trajectories& other) const { return byName() == other.byName(); }
    bool operator!=(const Trajectories& other) const { return !(*this == other); }
};

// SHA-256 fingerprints of what an item that reached its boundary computed, by the ledger's names.
struct Fingerprints {
    std::optional<std::string> liveCache;     // "live_cache": the cache decoding retained at the boundary
    std::optional<std::string> prefillCache;  // "prefill_cache": the one-shot prefill of the same ids
    std::optional<std::string> comparison;    // "comparison": the protocols' results and every trajectory

    std::map<std::string, std::string> byName() const;
    bool set(const std::string& name, std::string value);  // false for a name that is none of them
    bool operator==(const Fingerprints& other) const { return byName() == other.byName(); }
    bool operator!=(const Fingerprints& other) const { return !(*this == other); }
};

// The ledger's protocol name of a replay: "replay:" + its label.
std::string replayProtocol(const std::string& label);

// The ledger's form: {protocol name: object}. Equal values give equal JSON, and equal JSON equal bytes.
nlohmann::json toJson(const ItemResults& results);
// One protocol's stored object into `results`; FormatError naming `where`, the protocol and the field
// for an unknown protocol, a missing field or a value of the wrong type.
void readProtocolResult(ItemResults& results, const std::string& protocol, const nlohmann::json& data,
                        const std::string& where);
ItemResults itemResultsFromJson(const nlohmann::json& all, const std::string& where);
bool sameResults(const ItemResults& a, const ItemResults& b);  // field for field (by their JSON form)

}  // namespace kvscope::experiments
