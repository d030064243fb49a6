// SPDX-License-Identifier: MIT
// The forward pass against an independent float64 reference, and its building blocks.
#include "core/decode/generator.h"
#include "core/kernels/invariant_ops.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "core/util/threads.h"
#include "support/reference_model.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <dlfcn.h>

namespace kvscope {
namespace {

const std::vector<int64_t> kIds = {5, 71, 200, 33, 9, 150, 250, 7, 64, 301, 2, 99, 18, 120, 44, 260};

double maxAbsDiff(const torch::Tensor& logits, const std::vector<std::vector<double>>& ref) {
    double worst = 0;
    auto acc = logits.to(torch::kFloat64).contiguous();
    for (std::size_t s = 0; s < ref.size(); ++s)
        for (std::size_t v = 0; v < ref[s].size(); ++v)
            worst = std::max(worst, std::abs(acc[s][v].item<double>() - ref[s][v]));
    return worst;
}

class ReferenceAgreement : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceAgreement, Fp32ForwardMatchesFloat64ReferenceWithin1e4) {
    const std::string& dir = test::tinyModel(GetParam());
    Transformer model = Transformer::load(dir, torch::kFloat32, torch::kCPU);
    KvCache cache = model.newCache();
    torch::NoGradGuard noGrad;
    torch::Tensor logits = model.forward(kIds, cache, Logits::All);  // [S, V]
    auto ref = test::referenceLogits(dir, kIds);
    ASSERT_EQ(logits.size(0), static_cast<int64_t>(ref.size()));
    ASSERT_EQ(logits.size(1), static_cast<int64_t>(ref[0].size()));
    EXPECT_LT(maxAbsDiff(logits, ref), 1e-4);
    // The logits must not be trivially small, or the tolerance would mean nothing.
    EXPECT_GT(logits.abs().max().item<double>(), 0.5);
}

TEST_P(ReferenceAgreement, InvariantKernelsMatchFloat64ReferenceWithin1e4InFp32AndBf16Tracks) {
    const std::string& dir = test::tinyModel(GetParam());
    Numerics numerics;
    numerics.kernels = Kernels::Invariant;
    const auto ref = test::referenceLogits(dir, kIds);
    Transformer fp32 = Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, numerics);
    KvCache cache = fp32.newCache();
    EXPECT_LT(maxAbsDiff(fp32.forward(kIds, cache, Logits::All), ref), 1e-4);
    // In bf16 no better than bf16 storage allows: within twice the error of transformers' kernels.
    Transformer bf16 = Transformer::load(dir, torch::kBFloat16, torch::kCPU, nullptr, numerics);
    Transformer bf16Torch = Transformer::load(dir, torch::kBFloat16, torch::kCPU);
    KvCache bf16Cache = bf16.newCache(), bf16TorchCache = bf16Torch.newCache();
    const double invariantError = maxAbsDiff(bf16.forward(kIds, bf16Cache, Logits::All), ref);
    const double torchError = maxAbsDiff(bf16Torch.forward(kIds, bf16TorchCache, Logits::All), ref);
    EXPECT_GT(torchError, 0.0);
    EXPECT_LT(invariantError, 2 * torchError) << "torch kernels' bf16 error " << torchError;
}

TEST_P(ReferenceAgreement, OneShotPrefillEqualsTokenByTokenWithin1e4InFp32) {
    Transformer model = Transformer::load(test::tinyModel(GetParam()), torch::kFloat32, torch::kCPU);
    torch::NoGradGuard noGrad;
    KvCache oneShot = model.newCache();
    torch::Tensor all = model.forward(kIds, oneShot, Logits::All);  // [S, V]
    KvCache stepwise = model.newCache(4);                            // forces regrowth on the way
    for (std::size_t i = 0; i < kIds.size(); ++i) {
        torch::Tensor row = model.forward({kIds[i]}, stepwise, Logits::Last);  // [1, V]
        EXPECT_LT((row[0] - all[static_cast<int64_t>(i)]).abs().max().item<double>(), 1e-4) << "position " << i;
    }
    EXPECT_EQ(stepwise.ids(), oneShot.ids());
    for (int64_t l = 0; l < model.config().numLayers; ++l)
        EXPECT_TRUE(torch::allclose(stepwise.layerKeys(l), oneShot.layerKeys(l), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Architectures, ReferenceAgreement,
                         ::testing::Values("qwen2", "llama", "qwen3", "llama3-scaled", "qwen2-tied", "qwen2-sharded",
                                           "llama-bias"));

TEST(Transformer, Bf16RunsAndStaysCloseToFp32) {
    const std::string& dir = test::tinyModel("qwen2");
    Transformer fp32 = Transformer::load(dir, torch::kFloat32, torch::kCPU);
    Transformer bf16 = Transformer::load(dir, torch::kBFloat16, torch::kCPU);
    torch::NoGradGuard noGrad;
    KvCache c32 = fp32.newCache(), c16 = bf16.newCache();
    torch::Tensor a = fp32.forward(kIds, c32, Logits::All);
    torch::Tensor b = bf16.forward(kIds, c16, Logits::All);
    EXPECT_EQ(c16.layerKeys(0).scalar_type(), torch::kBFloat16);
    EXPECT_EQ(b.scalar_type(), torch::kFloat32);  // logits are always handed out in fp32
    const double scale = a.abs().max().item<double>();
    const double diff = (a - b).abs().max().item<double>();
    EXPECT_GT(diff, 0.0) << "bf16 identical to fp32 means the dtype was not applied";
    EXPECT_LT(diff / scale, 0.1);
    // Greedy choices mostly agree on a random model.
    auto ta = a.argmax(-1), tb = b.argmax(-1);
    EXPECT_GE(ta.eq(tb).sum().item<int64_t>(), static_cast<int64_t>(kIds.size()) * 3 / 4);
}

// PyTorch 2.x multiplies fp16 matrices on the CPU, libtorch 1.13 does not: an fp16 model runs where
// it can (its logits near fp32's, not bf16's bits) and is refused naming libtorch where it cannot.
TEST(Transformer, Fp16OnCpuRunsWhereLibtorchMultipliesItAndIsAClearErrorElsewhere) {
    const std::string dir = test::tinyModel("qwen2");
    if (!cpuMultipliesFp16()) {
        try {
            Transformer::load(dir, torch::kFloat16, torch::kCPU);
            FAIL() << "fp16 on CPU must be refused where libtorch cannot multiply it";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find("fp16"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("libtorch " TORCH_VERSION), std::string::npos) << e.what();
        }
        return;
    }
    const std::vector<int64_t> ids = {3, 17, 5, 9};
    auto logits = [&](torch::ScalarType dtype) {
        const Transformer t = Transformer::load(dir, dtype, torch::kCPU);
        KvCache cache = t.newCache();
        return t.forward(ids, cache, Logits::All);
    };
    const torch::Tensor fp16 = logits(torch::kFloat16), fp32 = logits(torch::kFloat32), bf16 = logits(torch::kBFloat16);
    EXPECT_EQ(fp16.scalar_type(), torch::kFloat32);
    const double fp16Error = (fp16 - fp32).abs().max().item<double>(),
                 bf16Error = (bf16 - fp32).abs().max().item<double>();
    EXPECT_GT(fp16Error, 0.0) << "fp16 identical to fp32 means the dtype was not applied";
    EXPECT_LT(fp16Error, bf16Error) << "fp16 keeps 3 more mantissa bits than bf16";
    Numerics invariant;
    invariant.kernels = Kernels::Invariant;
    EXPECT_THROW(Transformer::load(dir, torch::kFloat16, torch::kCPU, nullptr, invariant), UsageError);
}

// A copy of `w` with every tensor rounded to bf16 and back to fp32.
Weights roundedToBf16(const Weights& w) {
    auto round = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kBFloat16).to(torch::kFloat32) : t; };
    Weights r;
    r.embed = round(w.embed);
    for (const LayerWeights& l : w.layers)
        r.layers.push_back({round(l.inputNorm), round(l.wq), round(l.bq), round(l.wk), round(l.bk), round(l.wv),
                            round(l.bv), round(l.qNorm), round(l.kNorm), round(l.wo), round(l.bo), round(l.postNorm),
                            round(l.wGate), round(l.wUp), round(l.wDown)});
    r.finalNorm = round(w.finalNorm);
    r.lmHead = w.lmHead.is_same(w.embed) ? r.embed : round(w.lmHead);
    return r;
}

class MixedPrecisionTest : public ::testing::TestWithParam<Kernels> {};

// LayerCast: an fp32 model whose weights are rounded to bf16 at load computes exactly what an fp32
// model built from bf16-rounded copies of every weight computes, and not what the fp32 model does.
TEST_P(MixedPrecisionTest, Bf16RoundedWeightsAreAnFp32ModelOfTheRoundedValues) {
    const std::vector<int64_t> ids = {3, 17, 5, 9, 40};
    for (const char* family : {"qwen2", "llama"}) {
        Numerics plain, layerCast;
        plain.kernels = layerCast.kernels = GetParam();
        layerCast.mixed = MixedPrecision::Bf16RoundedWeights;
        const Transformer fp32 =
            Transformer::load(test::tinyModel(family), torch::kFloat32, torch::kCPU, nullptr, plain);
        const Transformer cast =
            Transformer::load(test::tinyModel(family), torch::kFloat32, torch::kCPU, nullptr, layerCast);
        const Transformer byHand(fp32.config(), roundedToBf16(fp32.weights()), torch::kFloat32, torch::kCPU, plain);
        KvCache a = cast.newCache(), b = byHand.newCache(), c = fp32.newCache();
        const torch::Tensor castLogits = cast.forward(ids, a, Logits::All);
        EXPECT_TRUE(torch::equal(castLogits, byHand.forward(ids, b, Logits::All))) << family;
        EXPECT_FALSE(torch::equal(castLogits, fp32.forward(ids, c, Logits::All))) << family << ": nothing was rounded";
        EXPECT_NE(cast.fingerprint(), byHand.fingerprint()) << "the numerics are part of the fingerprint";
        EXPECT_THROW(Transformer::load(test::tinyModel(family), torch::kBFloat16, torch::kCPU, nullptr, layerCast),
                     UsageError);
    }
}

// Records the last layer's output: the head's input.
struct LastHiddenState : ForwardObserver {
    int64_t lastLayer = 0;
    torch::Tensor value;
    void onOp(int64_t layer, const char* op, const torch::Tensor& t, int64_t) override {
        if (layer == lastLayer && std::string(op) == "mlp_residual") value = t.clone();
    }
};

// verl's remedy: a bf16 model's blocks unchanged, its last hidden state upcast and put through the
// final norm and the lm_head in fp32, with those weights as the checkpoint stores them.
TEST_P(MixedPrecisionTest, Fp32HeadTakesTheBf16BlocksOutputThroughAnFp32NormAndLmHead) {
    const std::vector<int64_t> ids = {3, 17, 5, 9, 40};
    for (const char* family : {"qwen2", "llama"}) {
        Numerics plain, fp32Head;
        plain.kernels = fp32Head.kernels = GetParam();
        fp32Head.mixed = MixedPrecision::Fp32Head;
        const std::string dir = test::tinyModel(family);
        const Transformer bf16 = Transformer::load(dir, torch::kBFloat16, torch::kCPU, nullptr, plain);
        const Transformer mixed = Transformer::load(dir, torch::kBFloat16, torch::kCPU, nullptr, fp32Head);
        const Transformer fp32 = Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, plain);
        EXPECT_TRUE(torch::equal(mixed.weights().lmHead, fp32.weights().lmHead)) << family;
        EXPECT_TRUE(torch::equal(mixed.weights().finalNorm, fp32.weights().finalNorm)) << family;

        LastHiddenState seenMixed, seenPlain;
        seenMixed.lastLayer = seenPlain.lastLayer = mixed.config().numLayers - 1;
        KvCache a = mixed.newCache(), b = bf16.newCache();
        const torch::Tensor logits = mixed.forward(ids, a, Logits::All, &seenMixed);
        const torch::Tensor plainLogits = bf16.forward(ids, b, Logits::All, &seenPlain);
        ASSERT_TRUE(seenMixed.value.defined());
        EXPECT_TRUE(torch::equal(seenMixed.value, seenPlain.value)) << family << ": the blocks must stay bf16";
        EXPECT_TRUE(torch::equal(a.layerKeys(0), b.layerKeys(0))) << family;
        // The head in fp32 as an fp32 model computes it, here by hand on the same kernels.
        const torch::Tensor x = seenMixed.value.to(torch::kFloat32);
        const double eps = fp32.config().rmsNormEps;
        const torch::Tensor& norm = fp32.weights().finalNorm;
        const torch::Tensor& head = fp32.weights().lmHead;
        const torch::Tensor expected =
            GetParam() == Kernels::Torch
                ? torch::linear(rmsNorm(x, norm, eps), head)
                : kernels::linear(kernels::rmsNorm(x, norm, eps, kernels::bestIsa()), head, {}, torch::kFloat32,
                                  kernels::bestIsa(), kernels::LinearOrder::Pairs);
        EXPECT_TRUE(torch::equal(logits, expected)) << family;
        EXPECT_FALSE(torch::equal(logits, plainLogits)) << family << ": a bf16 head gives other bits";
        EXPECT_THROW(Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, fp32Head), UsageError);
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, MixedPrecisionTest, ::testing::Values(Kernels::Torch, Kernels::Invariant),
                         [](const auto& info) { return kernelsName(info.param); });

TEST(Transformer, RejectsOutOfVocabularyIds) {
    Transformer model = Transformer::load(test::tinyModel("qwen2"), torch::kFloat32, torch::kCPU);
    KvCache cache = model.newCache();
    EXPECT_THROW(model.forward({model.config().vocabSize}, cache), UsageError);
    EXPECT_EQ(cache.length(), 0);
}

// ---- building blocks ----

TEST(RmsNorm, NormalisesInFp32AndScalesByWeight) {
    torch::Tensor x = torch::tensor({{3.0f, 4.0f}});
    torch::Tensor w = torch::tensor({1.0f, 2.0f});
    torch::Tensor y = rmsNorm(x, w, 0.0);
    const double rms = std::sqrt((9.0 + 16.0) / 2.0);
    EXPECT_NEAR(y[0][0].item<double>(), 3.0 / rms, 1e-6);
    EXPECT_NEAR(y[0][1].item<double>(), 2.0 * 4.0 / rms, 1e-6);
    // bf16 input: the result is bf16 (cast back before the weight), as in HF.
    EXPECT_EQ(rmsNorm(x.to(torch::kBFloat16), w.to(torch::kBFloat16), 1e-6).scalar_type(), torch::kBFloat16);
}

TEST(Rope, PositionZeroIsIdentityAndRotationPreservesNorm) {
    ModelConfig c;
    c.headDim = 8;
    c.ropeTheta = 10000.0;
    torch::Tensor inv = ropeInverseFrequencies(c);
    ASSERT_EQ(inv.size(0), 4);
    EXPECT_NEAR(inv[1].item<double>(), 1.0 / std::pow(10000.0, 2.0 / 8.0), 1e-7);
    torch::Tensor x = torch::randn({2, 5, 8});
    torch::Tensor r = applyRope(x, inv, 0);
    EXPECT_TRUE(torch::allclose(r[0][0], x[0][0]));  // position 0 is not rotated
    EXPECT_TRUE(torch::allclose(r.norm(2, -1), x.norm(2, -1), 1e-5, 1e-5));
    EXPECT_FALSE(torch::allclose(r[0][3], x[0][3]));
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
    ModelConfig c;
    c.headDim = 16;
    c.ropeTheta = 500.0;
    torch::Tensor inv = ropeInverseFrequencies(c);
    torch::Tensor q = torch::randn({1, 1, 16}, torch::kFloat64), k = torch::randn({1, 1, 16}, torch::kFloat64);
    auto dotAt = [&](int64_t m, int64_t n) {
        return (applyRope(q, inv.to(torch::kFloat64), m) * applyRope(k, inv.to(torch::kFloat64), n))
            .sum()
            .item<double>();
    };
    EXPECT_NEAR(dotAt(7, 3), dotAt(14, 10), 1e-9);
    EXPECT_NEAR(dotAt(2, 2), dotAt(40, 40), 1e-9);
}

TEST(Rope, Llama3ScalingSlowsOnlyLowFrequencies) {
    ModelConfig c;
    c.headDim = 64;
    c.ropeTheta = 500000.0;
    torch::Tensor plain = ropeInverseFrequencies(c);
    c.ropeScaling.type = RopeType::Llama3;
    c.ropeScaling.factor = 8.0;
    c.ropeScaling.originalMaxPositionEmbeddings = 8192;
    torch::Tensor scaled = ropeInverseFrequencies(c);
    EXPECT_FLOAT_EQ(scaled[0].item<float>(), plain[0].item<float>());             // highest frequency kept
    EXPECT_NEAR(scaled[31].item<double>(), plain[31].item<double>() / 8.0, 1e-12);  // lowest slowed 8x
}

TEST(GroupedQueryAttention, EqualsMultiHeadAttentionWithRepeatedKeyValueHeads) {
    // A GQA model (1 KV head for 4 query heads) must equal the same model written as MHA whose K/V
    // projections repeat the shared head for every query head.
    const std::string& dir = test::tinyModel("llama");
    Transformer gqa = Transformer::load(dir, torch::kFloat32, torch::kCPU);
    ModelConfig mhaConfig = gqa.config();
    ASSERT_EQ(mhaConfig.numKvHeads, 1);
    const int64_t G = mhaConfig.numHeads;
    mhaConfig.numKvHeads = mhaConfig.numHeads;
    Weights w = gqa.weights();
    for (auto& l : w.layers) {
        l.wk = l.wk.repeat({G, 1});
        l.wv = l.wv.repeat({G, 1});
    }
    Transformer mha(mhaConfig, w, torch::kFloat32, torch::kCPU);
    torch::NoGradGuard noGrad;
    KvCache a = gqa.newCache(), b = mha.newCache();
    torch::Tensor la = gqa.forward(kIds, a, Logits::All), lb = mha.forward(kIds, b, Logits::All);
    EXPECT_LT((la - lb).abs().max().item<double>(), 1e-5);
}

TEST(Threads, ConfigureThreadsBoundsEveryPoolIncludingOpenBlas) {
    using GetThreads = int (*)();
    auto* openblas = reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    for (const int n : {1, 2}) {
        configureThreads(n);
        EXPECT_EQ(at::get_num_threads(), n);
        if (openblas) {
            EXPECT_EQ(openblas(), n) << "OpenBLAS keeps its own pool; --threads must bound it too";
        }
    }
    if (!openblas) GTEST_SKIP() << "this libtorch does not use OpenBLAS (libtorch's own pool was checked)";
}

}  // namespace
}  // namespace kvscope
