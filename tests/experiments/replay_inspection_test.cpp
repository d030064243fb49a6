// SPDX-License-Identifier: MIT
// What the GUI shows of an imported run, computed where the CLI's code lives: per-token |delta| on a
// chosen basis, the run's |delta| in decades, the references a step's locator compares, and the
// located step itself on a real (tiny) model.
#include "experiments/replay_inspection.h"
#include "experiments/replay_locate.h"

#include "core/decode/teacher_forced.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvscope::experiments {
namespace {

// Output [5, 6, 7, 8]; the engine's logprobs and two replays', with known differences.
ItemRecord syntheticTrajectory(bool engineLogprobs = true) {
    ItemRecord item;
    item.itemId = "t0";
    item.trajectories.prompt = {1, 2, 3};
    item.trajectories.output = {5, 6, 7, 8};
    EngineRecord& engine = item.results.engine.emplace();
    engine.engine = "vllm";
    engine.dtype = "bf16";
    if (engineLogprobs) engine.logprobs = std::vector<double>{-1, -2, -0.5, -3};
    item.results.replays["prefill/torch/bf16"] = {{-1, -2.00003, -0.35, -5}, {1, 1, 1, 1}, {5, 6, 9, 8}, {1, 1, 2, 1}};
    item.results.replays["live/torch/bf16"] = {{-1, -2, -0.5, -3.5}, {1, 1, 1, 1}, {5, 6, 7, 8}, {1, 1, 1, 1}};
    return item;
}

TEST(ReplayInspection, DeltasMismatchAndHistogramFollowTheBasis) {
    const ItemRecord item = syntheticTrajectory();
    const DeltaBasis engine{"prefill/torch/bf16", ""}, live{"prefill/torch/bf16", "live/torch/bf16"};
    EXPECT_EQ(engine.name(), "prefill/torch/bf16 vs engine");
    const auto d = absDeltas(item, engine);
    ASSERT_EQ(d.size(), 4u);
    EXPECT_EQ(*d[0], 0.0);
    EXPECT_NEAR(*d[1], 3e-5, 1e-12);
    EXPECT_NEAR(*d[2], 0.15, 1e-12);
    EXPECT_EQ(*d[3], 2.0);
    EXPECT_NEAR(*absDeltas(item, live)[3], 1.5, 1e-12);

    const ItemMismatch m = itemMismatch(item, engine);
    EXPECT_TRUE(m.replayed);
    EXPECT_EQ(m.firstArgmaxMismatch, 2) << "the replay's argmax is 9 where the engine chose 7";
    EXPECT_EQ(m.maxAbsDelta, 2.0);
    EXPECT_NEAR(*m.meanAbsDelta, (0 + 3e-5 + 0.15 + 2) / 4, 1e-12);
    EXPECT_FALSE(itemMismatch(item, {"live/torch/bf16", ""}).firstArgmaxMismatch.has_value());
    EXPECT_FALSE(itemMismatch(item, {"chunked:4/torch/bf16", ""}).replayed);

    const ItemRecord silent = syntheticTrajectory(false);
    const ItemMismatch none = itemMismatch(silent, engine);
    EXPECT_TRUE(none.replayed);
    EXPECT_FALSE(none.maxAbsDelta.has_value()) << "an engine without logprobs gives no delta";
    EXPECT_EQ(none.firstArgmaxMismatch, 2) << "but the argmax still compares";
    EXPECT_TRUE(itemMismatch(silent, live).maxAbsDelta.has_value()) << "two replays compare without the engine";

    const std::vector<DeltaBin> bins = absDeltaHistogram({item, silent}, engine);
    std::vector<std::string> names;
    int64_t total = 0;
    for (const DeltaBin& b : bins) {
        names.push_back(b.name);
        total += b.tokens;
    }
    EXPECT_EQ(names,
              (std::vector<std::string>{"0", "<1e-6", "1e-6", "1e-5", "1e-4", "1e-3", "1e-2", "1e-1", "1", ">=10"}));
    EXPECT_EQ(total, 4) << "the silent engine's tokens have no delta";
    EXPECT_EQ(bins[0].tokens, 1);
    EXPECT_EQ(bins[3].tokens, 1) << "3e-5 in [1e-5, 1e-4)";
    EXPECT_EQ(bins[7].tokens, 1);
    EXPECT_EQ(bins[8].tokens, 1);
}

TEST(ReplayInspection, DecadeBinsHaveClosedLowerEdges) {
    EXPECT_EQ(deltaBinOf(0.0), 0u);
    EXPECT_EQ(deltaBinOf(1e-9), 1u);
    EXPECT_EQ(deltaBinOf(1e-6), 2u);
    EXPECT_EQ(deltaBinOf(9.9e-6), 2u);
    EXPECT_EQ(deltaBinOf(1e-2), 6u);
    EXPECT_EQ(deltaBinOf(1.0), 8u);
    EXPECT_EQ(deltaBinOf(10.0), 9u);
    EXPECT_EQ(deltaBinOf(std::numeric_limits<double>::infinity()), 9u);
}

TEST(ReplayInspection, LabelsParseBackAndNameTheReferencesToLocate) {
    const ReplayLabel l = parseReplayLabel("chunked:16/invariant/bf16-lmhead-fp32");
    EXPECT_EQ(l.reference, "chunked:16");
    EXPECT_EQ(l.kernels, Kernels::Invariant);
    EXPECT_EQ(l.precision.name(), "bf16-lmhead-fp32");
    for (const char* bad : {"prefill/torch", "nope/torch/bf16", "prefill/gpu/bf16", "prefill/torch/int8"})
        EXPECT_THROW(parseReplayLabel(bad), UsageError) << bad;
    using Pair = std::pair<std::string, std::string>;
    EXPECT_EQ(referencesToLocate({"prefill/torch/bf16", ""}), Pair("prefill", "live")) << "the engine decoded live";
    EXPECT_EQ(referencesToLocate({"live/torch/bf16", ""}), Pair("live", "prefill"));
    EXPECT_EQ(referencesToLocate({"prefill/torch/bf16", "chunked:8/torch/bf16"}), Pair("prefill", "chunked:8"));
    EXPECT_EQ(referencesToLocate({"prefill/torch/bf16", "prefill/invariant/bf16"}), Pair("prefill", "live"));
}

// A model's own greedy continuation (decoded live) as an imported trajectory.
ItemRecord greedyTrajectory(const Transformer& m, const std::vector<int64_t>& prompt, int64_t tokens) {
    ItemRecord item;
    item.itemId = "greedy";
    item.trajectories.prompt = prompt;
    std::vector<int64_t> output;
    KvCache cache = m.newCache(static_cast<int64_t>(prompt.size()) + tokens);
    torch::Tensor logits = m.forward(prompt, cache, Logits::Last);
    for (int64_t k = 0; k < tokens; ++k) {
        output.push_back(logits.reshape({-1}).argmax().item<int64_t>());
        logits = m.forward({output.back()}, cache, Logits::Last);
    }
    item.trajectories.output = output;
    return item;
}

// The locator's verdict at a step agrees with the replays: where prefill's and live's logprobs of a
// token differ, an op of that step must differ; with invariant kernels none does; one reference
// against itself never differs.
TEST(ReplayInspection, AStepIsLocatedWhereTheReferencesScoresPart) {
    const std::vector<int64_t> prompt = {3, 17, 42, 9, 11, 5, 60, 2};
    for (const Kernels kernels : {Kernels::Torch, Kernels::Invariant}) {
        Numerics numerics;
        numerics.kernels = kernels;
        const Transformer m =
            Transformer::load(test::tinyModel("qwen2-wide"), torch::kBFloat16, torch::kCPU, nullptr, numerics);
        const ItemRecord item = greedyTrajectory(m, prompt, 24);
        const auto& output = item.trajectories.output.value();
        const auto prefill = scoreContinuation(m, prompt, output, ForcedReference::parse("prefill"));
        const auto live = scoreContinuation(m, prompt, output, ForcedReference::parse("live"));
        int parted = 0;
        for (const int64_t step : {0, 1, 7, 23}) {
            const std::string where = kernelsName(kernels) + " step " + std::to_string(step);
            const LocatorReport r = locateReplayStep(m, item, step, "prefill", "live");
            ASSERT_FALSE(r.ops.empty()) << where;
            EXPECT_EQ(r.position, static_cast<int64_t>(prompt.size()) + step - 1) << where;
            const auto s = static_cast<std::size_t>(step);
            const bool scoresPart = prefill[s].logprob != live[s].logprob;
            parted += scoresPart;
            if (scoresPart) {
                EXPECT_TRUE(r.firstDifference.has_value()) << where;
            }
            if (kernels == Kernels::Invariant || step == 0) {
                EXPECT_FALSE(r.firstDifference.has_value()) << where;
            }
            EXPECT_FALSE(locateReplayStep(m, item, step, "chunked:5", "chunked:5").firstDifference.has_value())
                << where;
        }
        if (kernels == Kernels::Torch)
            std::cout << "[ torch kernels: prefill and live scores part at " << parted << " of 4 steps ]\n";
        EXPECT_THROW(locateReplayStep(m, item, 24, "prefill", "live"), UsageError) << "past the output";
        EXPECT_THROW(locateReplayStep(m, item, -1, "prefill", "live"), UsageError);
        EXPECT_THROW(locateReplayStep(m, item, 3, "prefill", "sideways"), UsageError);
    }
}

}  // namespace
}  // namespace kvscope::experiments
