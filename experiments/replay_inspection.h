// SPDX-License-Identifier: MIT
#pragma once
// A replayed run looked at token by token (the GUI's view of an imported run): each token's
// |delta logprob| between a replay and the engine or another replay, and the run's |delta| in fixed
// decades. Plain values, no torch: widgets read them. Where two references part at one step:
// experiments/replay_locate.h.
#include "experiments/ledger.h"

#include "core/model/numerics.h"

#include <optional>
#include <string>
#include <vector>

namespace kvscope::experiments {

// Whether a manifest is an imported run's (kvscope import) rather than a study's.
bool isImportedRun(const nlohmann::json& manifest);
// The replay labels any item of `items` holds, sorted.
std::vector<std::string> replayLabels(const std::vector<ItemRecord>& items);

// A replay label ("prefill/torch/bf16") read back into the parts that made it; UsageError naming the label.
struct ReplayLabel {
    std::string reference;  // a ForcedReference name: "prefill" | "live" | "chunked:N"
    Kernels kernels = Kernels::Torch;
    Precision precision;
};
ReplayLabel parseReplayLabel(const std::string& label);

// What a replay is measured against: the engine's own log-probabilities (empty label) or another replay.
struct DeltaBasis {
    std::string label;      // the replay whose logprobs are compared
    std::string against;    // another replay's label; empty: the engine's logprobs
    std::string name() const;  // "prefill/torch/bf16 vs engine", "... vs live/torch/bf16"
};

// |delta logprob| per output token of `item` on `basis`; none where a side has no logprob there
// (the engine gave none, or the item holds no such replay).
std::vector<std::optional<double>> absDeltas(const ItemRecord& item, const DeltaBasis& basis);

// The same token by token over a run, as a row per item: the table's sort keys.
struct ItemMismatch {
    std::optional<double> maxAbsDelta, meanAbsDelta;  // none: no token had both sides
    std::optional<int64_t> firstArgmaxMismatch;       // first step whose output token is not the replay's argmax
    bool replayed = false;                            // the item holds basis.label's replay
};
ItemMismatch itemMismatch(const ItemRecord& item, const DeltaBasis& basis);

// The run's tokens by |delta| in fixed bins, so two runs' bars compare: exactly 0, (0, 1e-6), then
// one per decade [1e-6, 1e-5) ... [1, 10), and >= 10. Tokens without a delta are not counted.
struct DeltaBin {
    std::string name;     // "0", "<1e-6", "1e-6", ..., "1", ">=10": the lower edge
    double lower = 0, upper = 0;  // [lower, upper); the zero bin is [0, 0]
    int64_t tokens = 0;
};
std::vector<DeltaBin> absDeltaHistogram(const std::vector<ItemRecord>& items, const DeltaBasis& basis);
std::size_t deltaBinOf(double absDelta);  // the index of absDeltaHistogram's bin that holds it

// The references a step's locator compares for `basis` (reference names): its two replays' where they
// differ; against the engine (whose tokens were decoded live) or between replays of one reference,
// that reference and live (prefill when the reference is live).
std::pair<std::string, std::string> referencesToLocate(const DeltaBasis& basis);

}  // namespace kvscope::experiments
