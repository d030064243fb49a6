// SPDX-License-Identifier: MIT
// The batch protocol: an item's prompt decoded alone and as the first row of left-padded batches.
#include "experiments/batch_protocol.h"

#include "core/util/error.h"

#include <algorithm>

namespace kvscope::experiments {
namespace {

// One row's ops in a batched forward, in the order they ran: the [B*S, F] ones cut to the row's own
// positions, the head's [B, ...] ones to the row. The ops a single sequence's forward shows.
struct RowOps : ForwardObserver {
    int64_t length = 0, pad = 0;  // the padded length S and the row's pads
    std::vector<std::pair<std::string, torch::Tensor>> ops;  // "layer L op" (or the head's "logits") -> values
    void onOp(int64_t layer, const char* op, const torch::Tensor& t, int64_t) override {
        const torch::Tensor row = layer < 0 ? t[0] : t.narrow(0, pad, length - pad);
        ops.emplace_back(layer < 0 ? std::string(op) : "layer " + std::to_string(layer) + " " + op, row.clone());
    }
};

// The first row of a greedy batched decode: its tokens, its logits at each step (step 0: the
// prefill), its prompt's K/V after the prefill, and its ops at one chosen step.
struct FirstRow {
    std::vector<int64_t> ids;
    std::vector<torch::Tensor> logits;        // [V] per step
    std::vector<torch::Tensor> keys, values;  // per layer, [KV, prompt, D]
    RowOps observed;                          // the ops of step `observeStep`, if asked for
};

// `prompts` left-padded (pad id 0: masked, so any id does) and decoded greedily together for
// `steps` tokens; every row decodes all of them (no stop rule parts one row from the others).
FirstRow decodeTogether(const Transformer& m, const std::vector<std::vector<int64_t>>& prompts, int64_t steps,
                        int64_t observeStep = -1) {
    BatchCache cache;
    const std::vector<std::vector<int64_t>> rows = leftPad(prompts, cache);
    FirstRow first;
    first.observed.length = observeStep == 0 ? static_cast<int64_t>(rows[0].size()) : 1;  // a decode step: one row each
    first.observed.pad = observeStep == 0 ? cache.pads[0] : 0;
    auto observer = [&](int64_t step) { return step == observeStep ? &first.observed : nullptr; };
    torch::Tensor logits = m.forwardBatch(rows, cache, observer(0));  // [B, V]
    for (int64_t l = 0; l < m.config().numLayers; ++l) {
        first.keys.push_back(cache.rowKeys(l, 0).clone());
        first.values.push_back(cache.rowValues(l, 0).clone());
    }
    const SamplingParams greedy;
    for (int64_t step = 0; step < steps; ++step) {
        first.logits.push_back(logits[0].clone());
        std::vector<std::vector<int64_t>> next;
        for (int64_t b = 0; b < logits.size(0); ++b)
            next.push_back({chooseToken(logits[b], greedy, static_cast<std::uint64_t>(step), 0).id});
        first.ids.push_back(next[0][0]);
        if (step + 1 < steps) logits = m.forwardBatch(next, cache, observer(step + 1));
    }
    return first;
}

// The first op of the prefill whose values differ between two runs of one row; none if all agree.
std::optional<std::string> firstDifferingOp(const RowOps& a, const RowOps& b) {
    for (std::size_t i = 0; i < std::min(a.ops.size(), b.ops.size()); ++i)
        if (a.ops[i].first != b.ops[i].first || !torch::equal(a.ops[i].second, b.ops[i].second)) return a.ops[i].first;
    return std::nullopt;
}

// The item in a batch against the item alone. Where some step's logits differ, both decodes run
// again to that step with its ops observed (the tokens before it are the same on both sides), and
// the first op that differs is named: "step K, layer L OP" (step 0: the prefill).
BatchCell compareWithAlone(const Transformer& m, const std::vector<std::vector<int64_t>>& prompts, int64_t steps,
                           const FirstRow& alone, std::vector<int64_t>& batchedIds) {
    const FirstRow batched = decodeTogether(m, prompts, steps);
    batchedIds = batched.ids;
    BatchCell cell;
    const int64_t div = firstDivergence(alone.ids, batched.ids);
    if (div >= 0) cell.firstDivergence = div;
    const std::size_t compared = div < 0 ? alone.logits.size() : static_cast<std::size_t>(div) + 1;
    std::optional<int64_t> firstOther;  // the first step whose logits differ
    for (std::size_t step = 0; step < compared && !firstOther; ++step)
        if (!torch::equal(alone.logits[step], batched.logits[step])) firstOther = static_cast<int64_t>(step);
    cell.logitsEqual = !firstOther;
    for (std::size_t l = 0; l < alone.keys.size(); ++l)
        cell.cacheEqual = cell.cacheEqual && torch::equal(alone.keys[l], batched.keys[l]) &&
                          torch::equal(alone.values[l], batched.values[l]);
    if (div >= 0)
        cell.marginAtDivergence =
            chooseToken(alone.logits[static_cast<std::size_t>(div)], SamplingParams{}, 0, 2).margin;
    if (firstOther) {
        const std::optional<std::string> op =
            firstDifferingOp(decodeTogether(m, {prompts[0]}, *firstOther + 1, *firstOther).observed,
                             decodeTogether(m, prompts, *firstOther + 1, *firstOther).observed);
        cell.firstDifferingOp = "step " + std::to_string(*firstOther) + ", " + op.value_or("no op before the logits");
    }
    return cell;
}

}  // namespace

BatchRun runBatch(const ItemContext& ctx, int64_t index, const std::vector<int64_t>& prompt) {
    if (!ctx.dataset || ctx.dataset->empty()) throw std::logic_error("the batch protocol needs the run's dataset");
    const ExperimentConfig& c = ctx.config;
    const auto n = static_cast<int64_t>(ctx.dataset->size());
    std::vector<std::vector<int64_t>> largest = {prompt};  // the item and the largest batch's fillers, rendered once
    for (int64_t k = 1; k < *std::max_element(c.batchSizes.begin(), c.batchSizes.end()); ++k)
        largest.push_back(promptIdsFor(ctx, (*ctx.dataset)[static_cast<std::size_t>((index + k) % n)]));
    BatchRun run;
    for (const Kernels kernels : {Kernels::Torch, Kernels::Invariant}) {
        const Transformer& m = ctx.models->get(c.dtypes.front(), kernels);
        const FirstRow alone = decodeTogether(m, {prompt}, c.maxNewTokens);
        const std::string name = kernelsName(kernels);
        run.continuations[batchContinuationName(name, 1)] = alone.ids;
        for (const int64_t size : c.batchSizes) {
            if (size == 1) continue;
            const std::vector<std::vector<int64_t>> prompts(largest.begin(), largest.begin() + size);
            run.result.byKernels[name][size] = compareWithAlone(m, prompts, c.maxNewTokens, alone,
                                                                run.continuations[batchContinuationName(name, size)]);
        }
    }
    return run;
}

}  // namespace kvscope::experiments
