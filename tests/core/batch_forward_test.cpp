// SPDX-License-Identifier: MIT
// Transformer::forwardBatch: sequences left-padded into one batch, as transformers' generate pads them.
#include "core/cache/kv_cache.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvscope {
namespace {

const std::vector<std::vector<int64_t>> kPrompts = {{3, 17, 5, 9, 40, 2, 11}, {8, 1}, {21, 4, 4, 30}};

struct Alone {
    std::vector<torch::Tensor> logits;  // per step, [V]
    KvCache cache;
};

// Each prompt alone, then `forced` tokens one at a time: the reference the batch is held to.
Alone runAlone(const Transformer& t, const std::vector<int64_t>& prompt, const std::vector<int64_t>& forced) {
    Alone a{{}, t.newCache()};
    a.logits.push_back(t.forward(prompt, a.cache)[0]);
    for (int64_t id : forced) a.logits.push_back(t.forward({id}, a.cache)[0]);
    return a;
}

// Prefill of the padded batch, then the same forced tokens for every row, one step at a time.
std::vector<torch::Tensor> runBatch(const Transformer& t, BatchCache& cache, const std::vector<int64_t>& forced) {
    std::vector<torch::Tensor> logits = {t.forwardBatch(leftPad(kPrompts, cache), cache)};  // [B, V] per step
    for (int64_t id : forced)
        logits.push_back(t.forwardBatch(std::vector<std::vector<int64_t>>(kPrompts.size(), {id}), cache));
    return logits;
}

class BatchForwardTest : public ::testing::TestWithParam<std::string> {};

// Invariant kernels: a row's bits never depend on the rows beside it or the pads before it: every
// row's logits at every step and its K/V are what it computes alone, bit for bit.
TEST_P(BatchForwardTest, InvariantKernelsGiveEachRowItsBitsAlone) {
    Numerics numerics;
    numerics.kernels = Kernels::Invariant;
    const std::vector<int64_t> forced = {6, 12, 1};
    for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
        const Transformer t = Transformer::load(test::tinyModel(GetParam()), dtype, torch::kCPU, nullptr, numerics);
        BatchCache cache;
        const std::vector<torch::Tensor> batch = runBatch(t, cache, forced);
        for (std::size_t r = 0; r < kPrompts.size(); ++r) {
            const Alone alone = runAlone(t, kPrompts[r], forced);
            for (std::size_t step = 0; step < batch.size(); ++step)
                EXPECT_TRUE(torch::equal(batch[step][static_cast<int64_t>(r)], alone.logits[step]))
                    << GetParam() << " row " << r << " step " << step;
            for (int64_t l = 0; l < t.config().numLayers; ++l) {
                EXPECT_TRUE(torch::equal(cache.rowKeys(l, static_cast<int64_t>(r)), alone.cache.layerKeys(l)))
                    << "row " << r << " layer " << l;
                EXPECT_TRUE(torch::equal(cache.rowValues(l, static_cast<int64_t>(r)), alone.cache.layerValues(l)))
                    << "row " << r << " layer " << l;
            }
        }
    }
}

// Torch kernels: a batch of one is the single-sequence forward, bit for bit (transformers' batch 1);
// in a padded batch each row's logits are its own (the pads masked, its positions from 0) to fp32
// rounding, whatever the products' other bits.
TEST_P(BatchForwardTest, TorchKernelsMaskThePadsAndABatchOfOneIsTheSequenceAlone) {
    const std::vector<int64_t> forced = {6, 12, 1};
    const Transformer t = Transformer::load(test::tinyModel(GetParam()), torch::kFloat32, torch::kCPU);
    for (std::size_t r = 0; r < kPrompts.size(); ++r) {
        const Alone alone = runAlone(t, kPrompts[r], forced);
        BatchCache one;
        one.pads = {0};
        std::vector<torch::Tensor> single = {t.forwardBatch({kPrompts[r]}, one)};
        for (int64_t id : forced) single.push_back(t.forwardBatch({{id}}, one));
        for (std::size_t step = 0; step < single.size(); ++step)
            EXPECT_TRUE(torch::equal(single[step][0], alone.logits[step])) << "row " << r << " step " << step;
    }
    BatchCache cache;
    const std::vector<torch::Tensor> batch = runBatch(t, cache, forced);
    for (std::size_t r = 0; r < kPrompts.size(); ++r) {
        const Alone alone = runAlone(t, kPrompts[r], forced);
        for (std::size_t step = 0; step < batch.size(); ++step)
            EXPECT_TRUE(torch::allclose(batch[step][static_cast<int64_t>(r)], alone.logits[step], 1e-4, 1e-4))
                << GetParam() << " row " << r << " step " << step;
        EXPECT_TRUE(torch::allclose(cache.rowKeys(0, static_cast<int64_t>(r)), alone.cache.layerKeys(0), 1e-5, 1e-5));
    }
}

INSTANTIATE_TEST_SUITE_P(Families, BatchForwardTest, ::testing::Values("qwen2", "llama", "qwen3"),
                         [](const auto& info) { return info.param; });

TEST(BatchForward, RefusesRowsOfUnequalLengthAndACacheOfOtherRows) {
    const Transformer t = Transformer::load(test::tinyModel("qwen2"), torch::kFloat32, torch::kCPU);
    BatchCache cache;
    cache.pads = {0, 0};
    EXPECT_THROW(t.forwardBatch({{1, 2}, {3}}, cache), UsageError);
    EXPECT_THROW(t.forwardBatch({{1, 2}}, cache), UsageError);
    EXPECT_THROW(t.forwardBatch({{1, 2}, {3, 1000000}}, cache), UsageError);
    cache.pads = {0, 2};  // a row of pads only
    EXPECT_THROW(t.forwardBatch({{1, 2}, {0, 0}}, cache), UsageError);
    cache.pads = {0, 0};
    const std::vector<int64_t> tooLong(static_cast<std::size_t>(t.config().maxPositionEmbeddings) + 1, 1);
    EXPECT_THROW(t.forwardBatch({tooLong, tooLong}, cache), UsageError);
}

}  // namespace
}  // namespace kvscope
