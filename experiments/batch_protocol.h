// SPDX-License-Identifier: MIT
#pragma once
// The batch protocol (experiment files: [batch] sizes, padding): does an item's greedy decode
// depend on the batch it is decoded in?
#include "experiments/protocols.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvscope::experiments {

struct BatchRun {
    BatchResult result;
    // Each kernel set's and batch size's greedy continuation of the item, named by
    // batchContinuationName (size 1: the item alone); the ledger keeps them as the item's trajectories.
    std::map<std::string, std::vector<int64_t>> continuations;
};

// The item alone and as the first row of a left-padded batch of each other size of the run (its
// fillers the dataset's next items, in order, wrapping around), greedily, max_new_tokens steps, with
// torch and with invariant kernels, in the run's main precision.
BatchRun runBatch(const ItemContext& ctx, int64_t index, const std::vector<int64_t>& prompt);

}  // namespace kvscope::experiments
