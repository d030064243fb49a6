// SPDX-License-Identifier: MIT
#pragma once
// One dataset item through the selected protocols (see docs/ARCHITECTURE.md for the data flow):
//
//   prompt ids --decode (greedy or seeded)--> trace ; boundary B in the trace
//   prefix = prompt + trace[0:B]  (integer ids, never re-tokenized)
//   live    = the cache a decode retains at B        -> continue = suffix A   (+ replica A')
//   prefill = one forward over the prefix            -> continue = suffix Bc  (+ replica Bc')
//   bridge: incremental:P rebuild == live, bit for bit? (invariant kernels: the one-shot prefill)
//   fixed_prefix_2x2: incremental vs prefill suffixes, in bf16 and in fp32
//   transplant: all (or chosen) layers both ways; does each continuation follow its cache donor?
//   localize: the smallest layer range (then K vs V) whose transplant makes prefill follow live
//   audit: in the run, the trajectories and both caches replayed from scratch (the replay that is
//          also matched's replicas; invariant kernels: each trajectory checked by one forward);
//          `kvscope audit` replays every protocol too (see AuditDepth)
// Each computation is done once: the live cache is the trace's own cut at B and suffix A the trace's
// tail; bridge and the 2x2 share the token-by-token cache.
#include "experiments/dataset.h"
#include "experiments/experiment_config.h"
#include "experiments/ledger.h"

#include "core/cache/cache_diff.h"
#include "core/decode/generator.h"
#include "core/model/transformer.h"
#include "core/text/tokenizer.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::experiments {

// Loads models lazily by precision and kernels, so a run only pays for the models it uses.
class ModelPool {
public:
    ModelPool(std::string dir, std::string device, Numerics numerics = {})
        : dir_(std::move(dir)), device_(std::move(device)), numerics_(numerics) {}
    // `precision`: a parsePrecision name ("bf16", "fp32", "fp16", "bf16-lmhead-fp32", "layercast").
    const Transformer& get(const std::string& precision);  // with the pool's kernels
    const Transformer& get(const std::string& precision, Kernels kernels);

private:
    std::string dir_, device_;
    Numerics numerics_;
    std::vector<std::pair<std::string, std::shared_ptr<Transformer>>> loaded_;  // key: precision + "/" + kernels
};

struct ItemContext {
    const ExperimentConfig& config;
    const Tokenizer& tokenizer;
    // The run's models: the main dtype (config.dtypes[0]) and, for fixed_prefix_2x2, each of
    // config.precisions, with the run's kernels; the batch protocol takes both kernel sets.
    ModelPool* models;
    std::string keepCachesDir;  // non-empty: save live and prefill caches there
    // The batch protocol's fillers: the run's dataset (null where no batch protocol runs).
    const std::vector<DatasetItem>* dataset = nullptr;
    // Every item's prompt through one renderer: the checkpoint's template is read once a run.
    std::shared_ptr<const ChatRenderer> chat =
        std::make_shared<const ChatRenderer>(config.chatTemplate, config.modelDir);
    // precision name (parsePrecision: "bf16", "layercast", ...) -> the model with the run's kernels
    const Transformer& model(const std::string& precision) const { return models->get(precision); }
};

// Runs every selected protocol for one item and returns what the ledger stores.
ItemRecord runItem(const ItemContext& ctx, const DatasetItem& item, int64_t index);

// How an audit replays an item.
//   Full: every protocol again from scratch, decoding token by token; every trajectory and every
//         fingerprint (incl. the one over all protocol results) compared. The only bit-exact way
//         with torch kernels, where a forward's bits depend on how many tokens it computes.
//   PrefillSpeed (runs with invariant kernels only): each stored trajectory checked by one forward
//         over its context and ids: every id must be what the run's sampling picks from the logits
//         before it, and it must stop where the run's stop rules say; the boundary cache rebuilt by
//         one prefill must carry the stored live and prefill fingerprints. Protocol results
//         (replicas, 2x2, transplant, localize) are not recomputed.
//   Auto: PrefillSpeed for invariant-kernel runs, Full otherwise.
enum class AuditDepth { Auto, Full, PrefillSpeed };

// Replays `item` and compares with `stored`: returns one line per mismatch (which trajectory or
// fingerprint, and where), empty when everything was reproduced.
std::vector<std::string> auditItem(const ItemContext& ctx, const DatasetItem& item, const ItemRecord& stored,
                                   AuditDepth depth = AuditDepth::Auto);
// Whether an audit of this run at `depth` replays at prefill speed.
bool auditsAtPrefillSpeed(const ExperimentConfig& config, AuditDepth depth);

std::vector<int64_t> promptIdsFor(const ItemContext& ctx, const DatasetItem& item);

// `a` followed by `b`: a prompt and the ids after it, as one forward reads them.
std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b);
// Index of the first position where two continuations differ (a length difference counts); -1 if equal.
int64_t firstDivergence(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
// Where the trace's stage boundary falls (number of generated tokens in the prefix), or 0 if the
// trace never reaches it or nothing would be left to continue.
int64_t boundaryIndex(const ItemContext& ctx, const std::vector<int64_t>& trace);
// New tokens a continuation from a boundary after `boundary` generated tokens may decode: the trace's
// budget less what it had spent there, at least one.
int64_t continuationBudget(const ExperimentConfig& c, int64_t boundary);
// The run's stop rules for a continuation of at most `budget` new tokens.
StopRules stopRules(const ItemContext& ctx, const Transformer& model, int64_t budget);

// Which continuation a transplant's result follows: its cache donor's (the transplanted layers carry
// the difference), its recipient's, both (they agree) or neither.
struct TransplantOutcome {
    bool followsDonor = false, followsRecipient = false;
    int64_t splitFromDonor = -1;  // first index where the result leaves the donor's continuation; -1 never
};
TransplantOutcome judgeTransplant(const std::vector<int64_t>& result, const std::vector<int64_t>& donor,
                                  const std::vector<int64_t>& recipient);

// The stage boundary a ledger item recorded; UsageError for an item that has none.
int64_t storedBoundary(const ItemRecord& item);

// One item's stage boundary rebuilt from stored ids (the ledger's prompt and trace, or a session's):
// the live cache a decode retains there, the one-shot prefill of the same ids, and each one's
// continuation under the run's sampling and stop rules - exactly what runItem compares.
struct BoundaryState {
    std::vector<int64_t> prompt, prefix;  // prefix = prompt + trace[0:boundary]
    int64_t boundary = 0, budget = 0;     // budget: new tokens left for a continuation
    KvCache live, prefill;
    GenerationResult liveSuffix, prefillSuffix;
};
// `keepGoing` is asked between tokens and steps; when it says no, Cancelled is thrown.
BoundaryState rebuildBoundary(const ItemContext& ctx, const std::vector<int64_t>& prompt,
                              const std::vector<int64_t>& trace, int64_t boundary,
                              const std::function<bool()>& keepGoing = {});
// A ledger item's boundary rebuilt from its stored prompt and trace, and checked against the
// ledger: the rebuilt live and prefill continuations must be those it recorded, or the views built on
// them would explain something else (UsageError: the model or kvscope changed since the run). An
// item without a boundary is refused by name (storedBoundary).
BoundaryState rebuildStoredBoundary(const ItemContext& ctx, const ItemRecord& item,
                                    const std::function<bool()>& keepGoing = {});
// A continuation from any cache of that prefix (a transplant, say) under the run's rules, by the
// model of `dtype` (empty: the run's main precision), which must be the one that built the cache.
GenerationResult continueWithRunRules(const ItemContext& ctx, const KvCache& cache, int64_t budget,
                                      const TokenCallback& onToken = {}, const std::string& dtype = "");
// The same by a given model (another dtype or kernels than the run's, as the GUI's comparisons).
GenerationResult continueWithRunRules(const ItemContext& ctx, const Transformer& model, const KvCache& cache,
                                      int64_t budget, const TokenCallback& onToken = {});

// Any two ways of rebuilding one stage boundary's prefix, side by side (the GUI's "compare" and
// `kvscope compare`): each side's cache by its construction and model, its continuation under the
// run's rules, where the continuations part, and the element-wise cache difference when both sides
// share a precision.
struct SideRecipe {
    std::string construction = "live";  // live | prefill | incremental[:K] | chunked:N
    std::string dtype;                   // empty: the run's main precision
    std::optional<Kernels> kernels;      // none: the run's
};
struct ComparedSide {
    std::string label;  // "prefill · bf16 · invariant kernels"
    KvCache cache;
    GenerationResult continuation;
};
struct SideComparison {
    ComparedSide a, b;
    int64_t firstDivergence = -1;  // of the two continuations; -1: identical
    std::optional<CacheDiff> diff;  // none when the precisions differ
};
// The model of a (dtype, kernels) pair: a ModelPool's get, say.
using ModelLookup = std::function<const Transformer&(const std::string& dtype, Kernels kernels)>;
// `keepGoing` is asked between tokens; when it says no, Cancelled is thrown.
SideComparison compareSides(const ItemContext& ctx, const ModelLookup& models, const BoundaryState& boundary,
                            const SideRecipe& a, const SideRecipe& b, const std::function<bool()>& keepGoing = {});

}  // namespace kvscope::experiments
