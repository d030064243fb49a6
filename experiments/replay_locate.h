// SPDX-License-Identifier: MIT
#pragma once
// Where two references' computations of one replayed step first part, op by op.
#include "experiments/ledger.h"
#include "experiments/trajectories.h"

#include "core/cache/locator.h"

#include <cstdint>
#include <string>

namespace kvscope::experiments {

// References `a` and `b` (ForcedReference names: "prefill", "live", "chunked:N"; UsageError
// otherwise) each rebuild prompt + output[:step] of `item` on `model`, and the forward that computes
// output[step]'s logits is compared op by op (locateDivergence; live is rebuilt as incremental over
// the prompt, its schedule). `step` must lie in the output (UsageError naming the item otherwise).
LocatorReport locateReplayStep(const Transformer& model, const ItemRecord& item, int64_t step, const std::string& a,
                               const std::string& b);

// `kvscope replay --locate ITEM:STEP`: the same for an item of an imported run, on the model the
// replay request names (its kernels and precision; importedModelPath checks it), between the references
// referencesToLocate names for {replay.label(), against}. UsageError for a study's run or an item
// the run lacks.
struct StepLocateRequest {
    ReplayRequest replay;
    std::string itemId;
    int64_t step = 0;
    std::string against;  // another replay's label; empty: the engine
};
struct LocatedStep {
    std::string itemId, a, b;  // the references compared
    int64_t step = 0;
    LocatorReport report;
};
LocatedStep locateReplayStep(const StepLocateRequest& request);

}  // namespace kvscope::experiments
