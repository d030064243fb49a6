// SPDX-License-Identifier: MIT
// Token choice: greedy tie-break, seeded sampling, and the per-step record.
#include "core/decode/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

namespace kvscope {
namespace {

TEST(Sampler, GreedyBreaksTiesTowardsTheLowestId) {
    torch::Tensor logits = torch::tensor({0.5f, 2.0f, 1.0f, 2.0f, 2.0f});
    StepRecord r = chooseToken(logits, {}, 0);
    EXPECT_EQ(r.id, 1);
    EXPECT_DOUBLE_EQ(r.margin, 0.0);  // a true tie
    ASSERT_GE(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].id, 1);
    EXPECT_EQ(r.top[1].id, 3);
    EXPECT_EQ(r.top[2].id, 4);
}

// The recorded top list is a full sort's first entries (higher logit first, ties by lower id), both
// where it is kept in one pass (a few entries) and where it is partially sorted (many), on a
// vocabulary-sized row with many ties.
TEST(Sampler, TheRecordedTopIsTheFullSortsHead) {
    torch::manual_seed(9);
    const torch::Tensor logits = torch::randint(0, 200, {151936}).to(torch::kFloat32) / 8;  // ~760 ties each
    const float* l = logits.data_ptr<float>();
    std::vector<int64_t> sorted(static_cast<std::size_t>(logits.numel()));
    std::iota(sorted.begin(), sorted.end(), 0);
    std::stable_sort(sorted.begin(), sorted.end(), [l](int64_t a, int64_t b) { return l[a] > l[b]; });
    for (const int top : {1, 5, 64, 65, 300}) {
        const StepRecord r = chooseToken(logits, {}, 0, top);
        EXPECT_EQ(r.id, sorted[0]);
        ASSERT_EQ(r.top.size(), static_cast<std::size_t>(top));
        for (int i = 0; i < top; ++i) ASSERT_EQ(r.top[static_cast<std::size_t>(i)].id, sorted[i]) << "top " << top;
    }
}

TEST(Sampler, RecordsLogprobMarginAndEntropyOfTheModelDistribution) {
    torch::Tensor logits = torch::tensor({std::log(0.5f), std::log(0.25f), std::log(0.25f)});
    StepRecord r = chooseToken(logits, {}, 0, 3);
    EXPECT_EQ(r.id, 0);
    EXPECT_NEAR(r.logprob, std::log(0.5), 1e-6);
    EXPECT_NEAR(r.margin, std::log(2.0), 1e-6);
    EXPECT_NEAR(r.entropy, -(0.5 * std::log(0.5) + 2 * 0.25 * std::log(0.25)), 1e-6);
    ASSERT_EQ(r.top.size(), 3u);
}

// A vocabulary-sized row (the sums run in blocks, with the kernels' exp): logprob and entropy as a
// double-precision log-softmax of the same logits gives them, to 1e-9 relative.
TEST(Sampler, LogprobAndEntropyMatchADoubleLogSoftmaxOverAWholeVocabulary) {
    torch::manual_seed(4);
    const torch::Tensor logits = torch::randn({151936}) * 4 + 2;  // an odd tail past the last full block
    const torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat64), 0);
    const StepRecord r = chooseToken(logits, {}, 0);
    const double expectedLogprob = logp[r.id].item<double>();
    const double expectedEntropy = -(logp.exp() * logp).sum().item<double>();
    EXPECT_NEAR(r.logprob, expectedLogprob, 1e-9 * std::abs(expectedLogprob));
    EXPECT_NEAR(r.entropy, expectedEntropy, 1e-9 * expectedEntropy);
}

TEST(Sampler, SampledDrawDependsOnlyOnSeedAndStep) {
    torch::Tensor logits = torch::randn({1000});
    SamplingParams p{1.0, 0, 1.0, 42};
    std::vector<int64_t> first, second;
    for (std::uint64_t step = 0; step < 50; ++step) first.push_back(chooseToken(logits, p, step).id);
    for (std::uint64_t step = 0; step < 50; ++step) second.push_back(chooseToken(logits, p, step).id);
    EXPECT_EQ(first, second);
    p.seed = 43;
    std::vector<int64_t> other;
    for (std::uint64_t step = 0; step < 50; ++step) other.push_back(chooseToken(logits, p, step).id);
    EXPECT_NE(first, other);
    EXPECT_GT(std::set<int64_t>(first.begin(), first.end()).size(), 10u);  // it really samples
}

TEST(Sampler, TopKOfOneIsGreedyAndTopKRestrictsTheSupport) {
    torch::Tensor logits = torch::randn({200});
    const int64_t best = chooseToken(logits, {}, 0).id;
    SamplingParams k1{5.0, 1, 1.0, 9};
    for (std::uint64_t s = 0; s < 20; ++s) EXPECT_EQ(chooseToken(logits, k1, s).id, best);
    SamplingParams k3{5.0, 3, 1.0, 9};
    auto top3 = std::get<1>(logits.topk(3));
    std::set<int64_t> allowed;
    for (int i = 0; i < 3; ++i) allowed.insert(top3[i].item<int64_t>());
    for (std::uint64_t s = 0; s < 50; ++s) EXPECT_TRUE(allowed.count(chooseToken(logits, k3, s).id));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
    // probabilities 0.7, 0.2, 0.1: top_p 0.6 keeps only the first token.
    torch::Tensor logits = torch::tensor({std::log(0.7f), std::log(0.2f), std::log(0.1f)});
    SamplingParams p{1.0, 0, 0.6, 1};
    for (std::uint64_t s = 0; s < 30; ++s) EXPECT_EQ(chooseToken(logits, p, s).id, 0);
    p.topP = 0.85;  // keeps the first two
    std::set<int64_t> seen;
    for (std::uint64_t s = 0; s < 200; ++s) seen.insert(chooseToken(logits, p, s).id);
    EXPECT_EQ(seen, (std::set<int64_t>{0, 1}));
}

TEST(Sampler, UniformDrawIsInUnitIntervalAndWellSpread) {
    double sum = 0;
    for (std::uint64_t s = 0; s < 10000; ++s) {
        const double u = uniformDraw(5, s);
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
        sum += u;
    }
    EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace kvscope
