// SPDX-License-Identifier: MIT
// The remedy: on the invariant kernels (--kernels invariant, invariant-tiles) every construction of a
// cache gives the live cache's bits, on every path a forward can take.
#include "core/cache/constructions.h"
#include "core/model/random_checkpoint.h"
#include "support/constructions.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace kvscope {
namespace {

using test::buildAll;
using test::Built;
using test::kPrompt;
using test::sameBits;

class InvariantConstructions : public ::testing::TestWithParam<std::string> {};

// Both invariant choices, and for each the dtypes where it matters: the tile order is a bf16 order.
const std::vector<std::pair<Kernels, torch::ScalarType>> kInvariantRuns = {{Kernels::Invariant, torch::kBFloat16},
                                                                           {Kernels::Invariant, torch::kFloat32},
                                                                           {Kernels::InvariantTiles, torch::kBFloat16}};

TEST_P(InvariantConstructions, InvariantKernelsMakeEveryConstructionBitExact) {
    // The remedy (--kernels invariant, invariant-tiles): a row's bits no longer depend on how many
    // rows a forward computes, so a one-shot prefill, chunks of any size and token-by-token all
    // rebuild the live cache, in bf16 as in fp32. The wide variant's 256 features span many 16-lane
    // chunks (and 8 tile-order chunks; prefills of 40 rows take 3 tiles of input rows on AMX).
    for (const auto& [kernelsChoice, dtype] : kInvariantRuns) {
        Numerics numerics;
        numerics.kernels = kernelsChoice;
        Transformer m = Transformer::load(test::tinyModel(GetParam() + std::string("-wide")), dtype, torch::kCPU,
                                          nullptr, numerics);
        Built b = buildAll(m, 40);
        for (const KvCache* other : {&b.prefill, &b.incremental, &b.tokenByToken, &b.chunked}) {
            EXPECT_TRUE(sameBits(b.live, *other))
                << other->construction() << " " << dtypeName(dtype) << " " << kernelsName(kernelsChoice);
            EXPECT_TRUE(torch::equal(b.live.nextLogits(), other->nextLogits())) << other->construction();
        }
        for (const char* chunking : {"chunked:1", "chunked:3", "chunked:17", "incremental:2"}) {
            const KvCache c = buildCache(m, b.live.ids(), Construction::parse(chunking), b.live.promptLength());
            EXPECT_TRUE(sameBits(b.live, c))
                << chunking << " " << dtypeName(dtype) << " " << kernelsName(kernelsChoice);
        }
        // The logits of every position from one forward equal each position's own decode step.
        KvCache all = m.newCache();
        const torch::Tensor everyRow = m.forward(b.live.ids(), all, Logits::All);         // [T, V]
        KvCache stepwise = m.newCache();
        for (std::size_t t = 0; t < b.live.ids().size(); ++t) {
            const torch::Tensor row = m.forward({b.live.ids()[t]}, stepwise);               // [1, V]
            ASSERT_TRUE(torch::equal(row[0], everyRow[static_cast<int64_t>(t)])) << "position " << t;
        }
    }
}

// Sizes that are no multiple of the 16-lane chunks anywhere: head_dim 24, hidden 120, 5 query heads
// on 1 KV head, intermediate 200.
RandomCheckpointSpec oddShapes(const std::string& architecture, uint64_t seed) {
    RandomCheckpointSpec spec;
    spec.architecture = architecture == "llama"   ? Architecture::Llama
                        : architecture == "qwen3" ? Architecture::Qwen3
                                                  : Architecture::Qwen2;
    spec.hiddenSize = 120, spec.numHeads = 5, spec.numKvHeads = 1, spec.intermediateSize = 200, spec.seed = seed;
    return spec;
}

TEST_P(InvariantConstructions, InvariantKernelsAreBitExactOnOddShapes) {
    // The invariance must not rest on aligned shapes.
    test::TempDir dir;
    writeRandomCheckpoint(oddShapes(GetParam(), 7), dir.file("odd"));
    for (const auto& [kernelsChoice, dtype] : kInvariantRuns) {
        Numerics numerics;
        numerics.kernels = kernelsChoice;
        Transformer m = Transformer::load(dir.file("odd"), dtype, torch::kCPU, nullptr, numerics);
        ASSERT_EQ(m.config().headDim, 24);
        const KvCache live = buildLiveCache(m, kPrompt, 37);
        for (const char* construction : {"prefill", "chunked:7", "incremental:0"}) {
            const KvCache other = buildCache(m, live.ids(), Construction::parse(construction), live.promptLength());
            EXPECT_TRUE(sameBits(live, other))
                << construction << " " << dtypeName(dtype) << " " << kernelsName(kernelsChoice);
        }
    }
}

// An observer that only counts the ops it sees: a forward with one computes every row of every op.
struct CountOps : ForwardObserver {
    int64_t ops = 0;
    void onOp(int64_t, const char*, const torch::Tensor&, int64_t) override { ++ops; }
};

TEST_P(InvariantConstructions, ADecodeStepOnRowsEqualsTheObservedStep) {
    // A decode step that nobody observes runs on rows (Transformer::decodeOnRows); one with an
    // observer, or on weights that are views, runs through blocks(), whose ops the locator reports.
    // Both must give the same logits and the same K and V, in every invariant mode and dtype, on the
    // wide model and on odd shapes.
    test::TempDir dir;
    writeRandomCheckpoint(oddShapes(GetParam(), 3), dir.file("odd"));
    for (const std::string& model : {test::tinyModel(GetParam() + std::string("-wide")), dir.file("odd")})
        for (const auto& [kernelsChoice, dtype] : kInvariantRuns) {
            Numerics numerics;
            numerics.kernels = kernelsChoice;
            const Transformer m = Transformer::load(model, dtype, torch::kCPU, nullptr, numerics);
            Weights viewed = m.weights();  // one weight a strided view of the same values
            viewed.layers.back().wUp = viewed.layers.back().wUp.t().contiguous().t();
            ASSERT_FALSE(viewed.layers.back().wUp.is_contiguous());
            const Transformer onViews(m.config(), viewed, dtype, torch::kCPU, numerics);
            ASSERT_TRUE(m.decodesOnRows());
            ASSERT_FALSE(onViews.decodesOnRows());
            KvCache prompt = m.newCache();
            m.forward(kPrompt, prompt);
            KvCache onRows = prompt.clone(), observed = prompt.clone(), throughViews = prompt.clone();
            for (const int64_t id : {5, 77, 130, 2}) {
                CountOps counted;
                const torch::Tensor rows = m.forward({id}, onRows);                            // [1, V]
                const torch::Tensor seen = m.forward({id}, observed, Logits::Last, &counted);  // [1, V]
                ASSERT_GT(counted.ops, 0);
                const std::string what = model + " " + dtypeName(dtype) + " " + kernelsName(kernelsChoice);
                EXPECT_TRUE(torch::equal(rows, seen)) << what << ", token " << id;
                EXPECT_TRUE(torch::equal(rows, onViews.forward({id}, throughViews))) << what << ", token " << id;
            }
            EXPECT_TRUE(sameBits(onRows, observed)) << model << " " << dtypeName(dtype);
            EXPECT_TRUE(sameBits(onRows, throughViews)) << model << " " << dtypeName(dtype);
        }
}

TEST_P(InvariantConstructions, OnlyTheLastLogitsLeaveTheSameCacheAndLogitsAsEveryRow) {
    // Where a forward returns only the last position's logits and nobody observes it, the last layer
    // takes its other rows only as far as their K and V (Transformer::forward's Span::lastLayerOnLastRow).
    // It must leave the same cache and the same logits as the forward that computes every row (all
    // logits, or an observer), from an empty cache and after one, in every invariant mode and dtype,
    // on the wide model and on odd shapes.
    test::TempDir dir;
    writeRandomCheckpoint(oddShapes(GetParam(), 5), dir.file("odd"));
    const std::vector<int64_t> more = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62};
    for (const std::string& model : {test::tinyModel(GetParam() + std::string("-wide")), dir.file("odd")})
        for (const auto& [kernelsChoice, dtype] : kInvariantRuns) {
            Numerics numerics;
            numerics.kernels = kernelsChoice;
            const Transformer m = Transformer::load(model, dtype, torch::kCPU, nullptr, numerics);
            const std::string what = model + " " + dtypeName(dtype) + " " + kernelsName(kernelsChoice);
            KvCache last = m.newCache(), every = m.newCache(), observed = m.newCache();
            for (const std::vector<int64_t>& ids : {kPrompt, more}) {  // the second forward after a cache
                CountOps counted;
                const torch::Tensor lastOnly = m.forward(ids, last);                          // [1, V]
                const torch::Tensor all = m.forward(ids, every, Logits::All);                 // [S, V]
                const torch::Tensor seen = m.forward(ids, observed, Logits::Last, &counted);  // [1, V]
                ASSERT_GT(counted.ops, 0);
                EXPECT_TRUE(torch::equal(lastOnly[0], all[all.size(0) - 1])) << what;
                EXPECT_TRUE(torch::equal(lastOnly, seen)) << what;
                EXPECT_TRUE(sameBits(last, every)) << what;
                EXPECT_TRUE(sameBits(last, observed)) << what;
            }
        }
}

TEST_P(InvariantConstructions, TheTileOrderIsAChoiceOfItsOwn) {
    // invariant-tiles computes a bf16 model's linears in another order than invariant: a model of
    // its own (fingerprint), close to the pair order's results, and in fp32 the same as invariant
    // (the tile order is a bf16 order). That the orders give other bits: tile_order_test.cpp (a
    // tiny model's short sums may round alike everywhere).
    const std::string dir = test::tinyModel(GetParam() + std::string("-wide"));
    Numerics pairs, tiles;
    pairs.kernels = Kernels::Invariant, tiles.kernels = Kernels::InvariantTiles;
    Transformer a = Transformer::load(dir, torch::kBFloat16, torch::kCPU, nullptr, pairs);
    Transformer b = Transformer::load(dir, torch::kBFloat16, torch::kCPU, nullptr, tiles);
    EXPECT_NE(a.fingerprint(), b.fingerprint());
    KvCache ca = a.newCache(), cb = b.newCache();
    const torch::Tensor la = a.forward(kPrompt, ca, Logits::All), lb = b.forward(kPrompt, cb, Logits::All);
    EXPECT_LT((la - lb).abs().max().item<double>(), 0.1 * la.abs().max().item<double>());
    Transformer a32 = Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, pairs);
    Transformer b32 = Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, tiles);
    KvCache c32a = a32.newCache(), c32b = b32.newCache();
    EXPECT_TRUE(torch::equal(a32.forward(kPrompt, c32a, Logits::All), b32.forward(kPrompt, c32b, Logits::All)));
}

TEST_P(InvariantConstructions, InvariantKernelsStayCloseToTorchKernels) {
    Numerics numerics;
    numerics.kernels = Kernels::Invariant;
    const std::string dir = test::tinyModel(GetParam());
    Transformer torchKernels = Transformer::load(dir, torch::kFloat32, torch::kCPU);
    Transformer invariant = Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, numerics);
    EXPECT_NE(torchKernels.fingerprint(), invariant.fingerprint());  // a cache of one is refused by the other
    KvCache a = torchKernels.newCache(), b = invariant.newCache();
    const torch::Tensor la = torchKernels.forward(kPrompt, a, Logits::All),
                        lb = invariant.forward(kPrompt, b, Logits::All);
    EXPECT_LT((la - lb).abs().max().item<double>(), 1e-4);
    for (int64_t l = 0; l < a.numLayers(); ++l)
        EXPECT_LT((a.layerKeys(l) - b.layerKeys(l)).abs().max().item<double>(), 1e-4) << "layer " << l;
}

INSTANTIATE_TEST_SUITE_P(Models, InvariantConstructions, ::testing::Values("qwen2", "llama", "qwen3"));

}  // namespace
}  // namespace kvscope
