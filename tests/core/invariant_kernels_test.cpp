// SPDX-License-Identifier: MIT
// The batch-invariant kernels on their own: every vector path equals the scalar reference bit for
// bit, a row's result does not depend on the rows computed with it or on the thread count, and the
// results are close to float64 arithmetic.
#include "core/kernels/invariant.h"
#include "core/kernels/invariant_ops.h"
#include "core/kernels/kernel_threads.h"
#include "core/util/error.h"
#include "core/util/version.h"
#include "support/test_support.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

namespace kvscope {
namespace {

using kernels::Isa;

// The vector paths this CPU can run, besides the scalar reference.
std::vector<Isa> vectorPaths() {
    std::vector<Isa> paths;
    for (const Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16})
        if (static_cast<int>(isa) <= static_cast<int>(kernels::bestIsa())) paths.push_back(isa);
    return paths;
}

bool sameBits(const torch::Tensor& a, const torch::Tensor& b) {
    return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
           torch::equal(a.contiguous().view(torch::kUInt8), b.contiguous().view(torch::kUInt8));
}

torch::Tensor randomTensor(std::vector<int64_t> shape, torch::ScalarType dtype) {
    return torch::randn(shape, torch::kFloat32).to(dtype);
}

// Sizes that exercise full 16-lane chunks, a padded tail, and reductions shorter than one chunk.
const std::vector<int64_t> kInputSizes = {1, 7, 16, 17, 31, 64, 100, 903};

TEST(InvariantKernels, VectorPathsEqualTheScalarReference) {
    if (vectorPaths().empty()) GTEST_SKIP() << "this CPU has neither AVX2+FMA nor AVX-512F: only the reference runs";
    torch::manual_seed(1);
    // Inputs and weights: fp32 (16-lane order), bf16 (the pair order), fp32 inputs on bf16 weights
    // (16-lane order, the weights widened).
    const std::vector<std::pair<torch::ScalarType, torch::ScalarType>> kinds = {
        {torch::kFloat32, torch::kFloat32}, {torch::kBFloat16, torch::kBFloat16}, {torch::kFloat32, torch::kBFloat16}};
    for (const auto& [xType, wType] : kinds) {
        for (const int64_t in : kInputSizes) {
            // From 24 rows the AVX2 path computes the 16-lane order as an outer product over panels
            // of 16 outputs (invariant_impl.h's panelLinear), and from 32 rows the paths without
            // VDPBF16PS compute the pair order over panels too: 37 outputs end in a ragged panel.
            for (const int64_t rows : {1, 2, 3, 5, 9, 24, 31, 32, 64}) {
                const int64_t outputs = rows < 24 ? 13 : 37;
                const torch::Tensor x = randomTensor({rows, in}, xType), w = randomTensor({outputs, in}, wType);
                const torch::Tensor reference = kernels::linear(x, w, {}, torch::kFloat32, Isa::Scalar);
                for (const Isa isa : vectorPaths())
                    EXPECT_TRUE(sameBits(kernels::linear(x, w, {}, torch::kFloat32, isa), reference))
                        << kernels::isaName(isa) << " linear, " << c10::toString(xType) << " x " << c10::toString(wType)
                        << " in=" << in << " rows=" << rows;
                // The tensor API sends many bf16 rows on an AMX CPU to the FMA route (pairsPathForRows):
                // VDPBF16PS over them, which other CPUs run, is checked through the raw entry point.
                if (xType == torch::kBFloat16 && kernels::bestIsa() == Isa::Avx512Bf16) {
                    torch::Tensor y = torch::empty({rows, outputs}, torch::kFloat32);
                    kernels::kernelPath(Isa::Avx512Bf16)
                        .linearPairs(reinterpret_cast<const uint16_t*>(x.data_ptr()), rows, in,
                                     reinterpret_cast<const uint16_t*>(w.data_ptr()), y.data_ptr<float>(), outputs, 0,
                                     outputs, nullptr);
                    EXPECT_TRUE(sameBits(y, reference)) << "VDPBF16PS over " << rows << " rows, in=" << in;
                }
                if (xType != wType) continue;
                const torch::Tensor normWeight = randomTensor({in}, wType);
                const torch::Tensor normed = kernels::rmsNorm(x, normWeight, 1e-6, Isa::Scalar);
                for (const Isa isa : vectorPaths())
                    EXPECT_TRUE(sameBits(kernels::rmsNorm(x, normWeight, 1e-6, isa), normed)) << kernels::isaName(isa);
            }
        }
    }
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        // Query heads per KV head: 3, 7 (Qwen2.5-0.5B's: the AVX-512 path computes 4 of them, then
        // 3, together), 6 (4, then 2), 1; one query (a decode step) and seven.
        for (const auto& [Q, KV] : {std::pair<int64_t, int64_t>{6, 2}, {14, 2}, {12, 2}, {4, 4}}) {
            for (const int64_t D : {8, 24, 64, 80, 128}) {
                for (const int64_t S : {1, 7}) {
                    const int64_t start = 5;
                    const torch::Tensor q = randomTensor({S, Q, D}, dtype);
                    const torch::Tensor keys = randomTensor({KV, 40, D}, dtype).narrow(1, 0, start + S);
                    const torch::Tensor values = randomTensor({KV, 40, D}, dtype).narrow(1, 0, start + S);
                    const torch::Tensor reference = kernels::attention(q, keys, values, start, Isa::Scalar);
                    for (const Isa isa : vectorPaths())
                        EXPECT_TRUE(sameBits(kernels::attention(q, keys, values, start, isa), reference))
                            << kernels::isaName(isa) << " attention, " << c10::toString(dtype) << " Q=" << Q
                            << " KV=" << KV << " D=" << D << " S=" << S;
                }
            }
        }
    }
}

// Wide inputs: a weight panel of 4864 inputs is 622 KB, so only a few fit the L2 share that
// panelLinear groups them by (kernels::cacheBytesForPanels: 2 on a 2 MiB L2), and 70 outputs end in a
// ragged group and a ragged panel; in both orders, against the reference bit for bit.
TEST(InvariantKernels, WideInputsInGroupsOfPanelsEqualTheScalarReference) {
    if (vectorPaths().empty()) GTEST_SKIP() << "this CPU has neither AVX2+FMA nor AVX-512F: only the reference runs";
    torch::manual_seed(5);
    constexpr int64_t kIn = 4864, kOutputs = 70, kRows = 64;
    for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
        const torch::Tensor x = randomTensor({kRows, kIn}, dtype), w = randomTensor({kOutputs, kIn}, dtype);
        const torch::Tensor reference = kernels::linear(x, w, {}, torch::kFloat32, Isa::Scalar);
        for (const Isa isa : vectorPaths())
            EXPECT_TRUE(sameBits(kernels::linear(x, w, {}, torch::kFloat32, isa), reference))
                << kernels::isaName(isa) << " " << c10::toString(dtype) << ", panels of "
                << kernels::cacheBytesForPanels() << " bytes";
    }
}

// The kernels' own exp (softmax, SiLU): within 2 ulp of e^x over the range it computes, 0 below
// ln(FLT_MIN), e^88 above 88 (its clamp), NaN for NaN; every path the scalar reference's bits.
TEST(InvariantKernels, TheKernelsExpIsWithinTwoUlpAndTheSameOnEveryPath) {
    std::vector<float> x;
    for (float v = -87.3f; v <= 88.0f; v += 0.000731f) x.push_back(v);
    for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f, -0.5f, 88.0f, -87.336f}) x.push_back(v);
    const auto n = static_cast<int64_t>(x.size());
    std::vector<float> reference(x.size()), y(x.size());
    kernels::kernelPath(Isa::Scalar).exps(x.data(), 0.0f, reference.data(), n);
    double worstUlps = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double exact = std::exp(static_cast<double>(x[i]));
        const double ulp = std::nextafter(static_cast<float>(exact), INFINITY) - static_cast<float>(exact);
        worstUlps = std::max(worstUlps, std::fabs(reference[i] - exact) / ulp);
    }
    EXPECT_LE(worstUlps, 2.0);
    std::vector<float> edges = {-87.34f, -100.0f, -1e30f, -INFINITY, 88.5f, 1e30f, INFINITY, NAN};
    std::vector<float> edgeOut(edges.size());
    kernels::kernelPath(Isa::Scalar).exps(edges.data(), 0.0f, edgeOut.data(), static_cast<int64_t>(edges.size()));
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(edgeOut[i], 0.0f) << edges[i];
    for (std::size_t i = 4; i < 7; ++i) EXPECT_EQ(edgeOut[i], edgeOut[4]) << edges[i];
    EXPECT_NEAR(edgeOut[4] / std::exp(88.0), 1.0, 1e-6);
    EXPECT_TRUE(std::isnan(edgeOut[7]));
    // The shift is subtracted first (softmax's maximum), and tails shorter than 16 are computed alike.
    std::vector<float> shifted(x.size());
    kernels::kernelPath(Isa::Scalar).exps(x.data(), 1.5f, shifted.data(), n);
    for (std::size_t i = 0; i < x.size(); i += 997) {
        float one = 0, alone = x[i] - 1.5f;
        kernels::kernelPath(Isa::Scalar).exps(&alone, 0.0f, &one, 1);
        EXPECT_EQ(one, shifted[i]) << x[i];
    }
    for (const Isa isa : vectorPaths()) {
        for (const int64_t count : {n, int64_t{1}, int64_t{15}, int64_t{17}}) {
            kernels::kernelPath(isa).exps(x.data(), 0.0f, y.data(), count);
            EXPECT_EQ(std::memcmp(y.data(), reference.data(), static_cast<std::size_t>(count) * sizeof(float)), 0)
                << kernels::isaName(isa) << " n=" << count;
        }
        kernels::kernelPath(isa).exps(edges.data(), 0.0f, y.data(), static_cast<int64_t>(edges.size()));
        EXPECT_EQ(std::memcmp(y.data(), edgeOut.data(), 7 * sizeof(float)), 0) << kernels::isaName(isa);
        EXPECT_TRUE(std::isnan(y[7])) << kernels::isaName(isa);
        for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
            const torch::Tensor gate = randomTensor({3, 4864 + 5}, dtype) * 8, up = randomTensor({3, 4864 + 5}, dtype);
            EXPECT_TRUE(sameBits(kernels::siluGate(gate, up, isa), kernels::siluGate(gate, up, Isa::Scalar)))
                << kernels::isaName(isa) << " SiLU, " << c10::toString(dtype);
        }
    }
}

// The elementwise steps (a linear's bias and rounding, SiLU-gate, the residual add, RMSNorm's
// scaling) on every path,
// the reference included, give the bits of the fp32 operations and c10::BFloat16's rounding that
// they replace, on values that reach every case of the rounding: ties to even both ways, the
// largest finite float (which rounds to infinity), infinities, NaN, denormals, both zeros.
TEST(InvariantKernels, TheElementwiseStepsRoundAsTorchDoes) {
    std::vector<float> x = {1.0f + 0x1p-8f,
                            1.0f + 0x3p-8f,
                            -1.0f - 0x1p-8f,
                            3.4028235e38f,
                            -3.4028235e38f,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            1e-40f,
                            -1e-40f,
                            0.0f,
                            -0.0f,
                            65504.0f,
                            1.0f + 0x1p-9f};
    const torch::Tensor random = torch::randn({1000}) * 50;
    for (int64_t i = 0; i < random.numel(); ++i) x.push_back(random[i].item<float>());
    const auto n = static_cast<int64_t>(x.size());
    std::vector<float> y(x.rbegin(), x.rend()), scaled(x.size());
    std::vector<uint16_t> xb(x.size()), yb(x.size());
    auto bits = [](c10::BFloat16 v) { return v.x; };
    for (std::size_t i = 0; i < x.size(); ++i) xb[i] = bits(c10::BFloat16(x[i])), yb[i] = bits(c10::BFloat16(y[i]));
    auto value = [](uint16_t b) { return static_cast<float>(c10::BFloat16(b, c10::BFloat16::from_bits())); };

    std::vector<uint16_t> withFloatBias(x.size()), withBf16Bias(x.size()), noBias(x.size()), silu(x.size()),
        normed(x.size()), sum(x.size());
    std::vector<float> e(x.size()), siluF(x.size()), normedF(x.size()), sumF(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        withFloatBias[i] = bits(c10::BFloat16(x[i] + y[i]));
        sum[i] = bits(c10::BFloat16(value(xb[i]) + value(yb[i])));
        sumF[i] = x[i] + y[i];
        withBf16Bias[i] = bits(c10::BFloat16(x[i] + value(yb[i])));
        noBias[i] = bits(c10::BFloat16(x[i]));
        e[i] = -value(xb[i]);
        normed[i] = bits(c10::BFloat16(value(yb[i]) * value(bits(c10::BFloat16(x[i] * 0.37f)))));
        normedF[i] = y[i] * (x[i] * 0.37f);
    }
    kernels::kernelPath(Isa::Scalar).exps(e.data(), 0.0f, e.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i)
        silu[i] = bits(c10::BFloat16(value(xb[i]) / (1.0f + e[i]) * value(yb[i])));
    for (std::size_t i = 0; i < x.size(); ++i) e[i] = -x[i];
    kernels::kernelPath(Isa::Scalar).exps(e.data(), 0.0f, e.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i) siluF[i] = x[i] / (1.0f + e[i]) * y[i];

    std::vector<Isa> paths = vectorPaths();
    paths.insert(paths.begin(), Isa::Scalar);
    auto same = [](const auto& a, const auto& b, int64_t count) {
        return std::memcmp(a.data(), b.data(), static_cast<std::size_t>(count) * sizeof(a[0])) == 0;
    };
    for (const Isa isa : paths) {
        for (const int64_t count : {n, int64_t{5}, int64_t{16}, int64_t{21}}) {  // whole steps and a padded tail
            const std::string where = std::string(kernels::isaName(isa)) + " n=" + std::to_string(count);
            std::vector<uint16_t> out(x.size());
            std::vector<float> outF(x.size());
            kernels::kernelPath(isa).f32.finishSums(x.data(), y.data(), out.data(), count);
            EXPECT_TRUE(same(out, withFloatBias, count)) << where << " fp32 bias";
            kernels::kernelPath(isa).bf16.finishSums(x.data(), yb.data(), out.data(), count);
            EXPECT_TRUE(same(out, withBf16Bias, count)) << where << " bf16 bias";
            kernels::kernelPath(isa).f32.finishSums(x.data(), nullptr, out.data(), count);
            EXPECT_TRUE(same(out, noBias, count)) << where << " no bias";
            kernels::kernelPath(isa).bf16.siluGate(xb.data(), yb.data(), out.data(), count);
            EXPECT_TRUE(same(out, silu, count)) << where << " bf16 SiLU";
            kernels::kernelPath(isa).f32.siluGate(x.data(), y.data(), outF.data(), count);
            EXPECT_TRUE(same(outF, siluF, count)) << where << " fp32 SiLU";
            kernels::kernelPath(isa).bf16.add(xb.data(), yb.data(), out.data(), count);
            EXPECT_TRUE(same(out, sum, count)) << where << " bf16 add";
            kernels::kernelPath(isa).f32.add(x.data(), y.data(), outF.data(), count);
            EXPECT_TRUE(same(outF, sumF, count)) << where << " fp32 add";
            kernels::kernelPath(isa).bf16.scaleByWeight(x.data(), 0.37f, yb.data(), out.data(), count);
            EXPECT_TRUE(same(out, normed, count)) << where << " bf16 norm";
            kernels::kernelPath(isa).f32.scaleByWeight(x.data(), 0.37f, y.data(), outF.data(), count);
            EXPECT_TRUE(same(outF, normedF, count)) << where << " fp32 norm";
        }
    }
}

// The residual add takes two tensors of one dtype and shape, as the model's blocks give it; anything
// else is a clear error, not a read past the smaller one.
TEST(InvariantKernels, AResidualAddRefusesOperandsOfAnotherShapeOrDtype) {
    const torch::Tensor x = torch::zeros({2, 8}, torch::kBFloat16);
    EXPECT_THROW(kernels::add(x, torch::zeros({2, 9}, torch::kBFloat16)), UsageError);
    EXPECT_THROW(kernels::add(x, torch::zeros({2, 8}, torch::kFloat32)), UsageError);
    EXPECT_TRUE(sameBits(kernels::add(x, x), x));  // 0 + 0 = 0
}

// A linear finishes its sums (bias, rounding to the output's dtype) as torch's add and cast would,
// on every path, row count (the panel paths from 24-64 rows) and order: the pair order flushes
// denormals inside the kernels, which must not reach the bias add. Two outputs have zero weights
// and denormal biases: their outputs are the biases, which a flushed add would turn into zero.
TEST(InvariantKernels, ALinearFinishesItsSumsAsTorchsAddAndCastDo) {
    torch::manual_seed(12);
    std::vector<Isa> paths = vectorPaths();
    paths.insert(paths.begin(), Isa::Scalar);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        const int64_t in = 903, outputs = 517;  // 517: several panel groups, the last one ragged
        torch::Tensor w = randomTensor({outputs, in}, dtype), b = randomTensor({outputs}, dtype);
        w[5].zero_();
        w[6].zero_();
        b[5] = 1e-39f;  // an fp32 denormal, and a bf16 one once cast
        b[6] = -3e-40f;
        ASSERT_NE(b[5].item<float>(), 0.0f);
        for (const int64_t rows : {1, 13, 40, 70, 131}) {
            const torch::Tensor x = randomTensor({rows, in}, dtype);
            for (const Isa isa : paths)
                for (const kernels::LinearOrder order : {kernels::LinearOrder::Pairs, kernels::LinearOrder::Tiles}) {
                    // The tile order is bf16's only, on AMX or its reference whatever `isa` says: once.
                    if (order == kernels::LinearOrder::Tiles && (dtype != torch::kBFloat16 || isa != paths.front()))
                        continue;
                    const torch::Tensor sums = kernels::linear(x, w, {}, torch::kFloat32, isa, order);
                    const torch::Tensor biased = sums + b.to(torch::kFloat32);
                    const std::string where = std::string(kernels::isaName(isa)) + " " + c10::toString(dtype) +
                                              " rows=" + std::to_string(rows) +
                                              (order == kernels::LinearOrder::Tiles ? " tiles" : "");
                    ASSERT_EQ(biased[0][5].item<float>(), b[5].item<float>()) << where;
                    EXPECT_TRUE(sameBits(kernels::linear(x, w, b, dtype, isa, order), biased.to(dtype))) << where;
                    EXPECT_TRUE(sameBits(kernels::linear(x, w, b, torch::kFloat32, isa, order), biased)) << where;
                    EXPECT_TRUE(sameBits(kernels::linear(x, w, {}, dtype, isa, order), sums.to(dtype))) << where;
                }
        }
    }
}

// Where VDPBF16PS runs at half the FMA rate (CPUs with AMX-BF16), a bf16 linear of 32 rows or
// more takes the pair order by FMAs on the AVX-512F path; everything else keeps its path.
TEST(InvariantKernels, ManyBf16RowsTakeTheFmaRouteOnlyWhereTheCpuHasAmx) {
    for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
        for (const int64_t rows : {1, 31, 32, 512}) EXPECT_EQ(kernels::pairsPathForRows(isa, rows), isa);
    for (const int64_t rows : {1, 31}) EXPECT_EQ(kernels::pairsPathForRows(Isa::Avx512Bf16, rows), Isa::Avx512Bf16);
    // The flags the kernel reports (/proc/cpuinfo), against the dispatcher's own CPUID reading.
    const std::string features = " " + cpuVectorFeatures() + " ";
    if (features.find(" avx512f ") == std::string::npos) GTEST_SKIP() << "no AVX-512F flag to compare: " << features;
    const bool amx = features.find(" amx_bf16 ") != std::string::npos;
    for (const int64_t rows : {32, 512})
        EXPECT_EQ(kernels::pairsPathForRows(Isa::Avx512Bf16, rows), amx ? Isa::Avx512 : Isa::Avx512Bf16) << rows;
}

// The pair order written out independently of the kernels' template: per chunk of 32, lane j adds
// the product of element 2j+1, then of 2j, one rounding each; then the tree; denormal inputs and
// results flushed to zero. The kernels must give exactly this for bf16 x bf16.
float flushed(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
float pairOrderDot(const torch::Tensor& x, const torch::Tensor& w) {  // [n] bf16 each
    const torch::Tensor xf = x.to(torch::kFloat32), wf = w.to(torch::kFloat32);
    const int64_t n = x.size(0);
    auto at = [n](const torch::Tensor& t, int64_t i) { return i < n ? flushed(t[i].item<float>()) : 0.0f; };
    float lane[16] = {};
    for (int64_t chunk = 0; chunk < n; chunk += 32)
        for (int64_t j = 0; j < 16; ++j) {
            const int64_t odd = chunk + 2 * j + 1, even = chunk + 2 * j;
            lane[j] = flushed(std::fma(at(xf, odd), at(wf, odd), lane[j]));
            lane[j] = flushed(std::fma(at(xf, even), at(wf, even), lane[j]));
        }
    for (int width = 8; width >= 1; width /= 2)
        for (int j = 0; j < width; ++j) lane[j] = flushed(lane[j] + lane[j + width]);
    return lane[0];
}

TEST(InvariantKernels, Bf16LinearsTakeThePairOrderOfTheBf16DotProduct) {
    torch::manual_seed(6);
    // 3 rows: dot-product tiles on every path; 40: without VDPBF16PS, the 16-lane order over laid-out
    // copies (invariant_impl.h's linearPairs), checked on its first, a middle and its last row; two
    // projections of one input in one call (one parallel region) give each its own outputs' bits.
    for (const int64_t rows : {3, 40}) {
        for (const int64_t in : {1, 31, 32, 33, 100, 903}) {
            const torch::Tensor x = randomTensor({rows, in}, torch::kBFloat16);
            const torch::Tensor w = randomTensor({5, in}, torch::kBFloat16);
            std::vector<Isa> paths = vectorPaths();
            paths.push_back(Isa::Scalar);
            for (const Isa isa : paths) {
                const auto ys = kernels::linears(x, {{w, {}}, {w.flip(0), {}}}, torch::kFloat32, isa);
                for (const int64_t r : {int64_t{0}, rows / 2, rows - 1})
                    for (int64_t o = 0; o < 5; ++o) {
                        EXPECT_EQ(ys[0][r][o].item<float>(), pairOrderDot(x[r], w[o]))
                            << kernels::isaName(isa) << " in=" << in << " rows=" << rows << " row " << r << " output "
                            << o;
                        EXPECT_EQ(ys[1][r][4 - o].item<float>(), ys[0][r][o].item<float>()) << kernels::isaName(isa);
                    }
            }
        }
    }
}

TEST(InvariantKernels, ThePairOrderFlushesDenormalsAsVdpbf16psDoes) {
#if !defined(__x86_64__) && !defined(__i386__)
    GTEST_SKIP() << "the pair order flushes through the x86 MXCSR; elsewhere (no vector path) nothing is flushed";
#endif
    // 2^-100 * 2^-30 = 2^-130 is below fp32's smallest normal: flushed, the sum is 0 (not 2^-130). A
    // denormal bf16 input (bits 0x0001, 2^-133) counts as 0 (not 2^-133 * 2^100 = 2^-33).
    auto bf16 = [](std::vector<float> v) { return torch::tensor(v).to(torch::kBFloat16).unsqueeze(0); };
    const torch::Tensor tinyProduct = bf16({std::ldexp(1.0f, -100)}), tinyWeight = bf16({std::ldexp(1.0f, -30)});
    const torch::Tensor denormal = torch::full({1, 1}, 1, torch::kInt16).view(torch::kBFloat16);
    const torch::Tensor large = bf16({std::ldexp(1.0f, 100)});
    std::vector<Isa> paths = vectorPaths();
    paths.push_back(Isa::Scalar);
    for (const Isa isa : paths) {
        EXPECT_EQ(kernels::linear(tinyProduct, tinyWeight, {}, torch::kFloat32, isa).item<float>(), 0.0f)
            << kernels::isaName(isa);
        EXPECT_EQ(kernels::linear(denormal, large, {}, torch::kFloat32, isa).item<float>(), 0.0f)
            << kernels::isaName(isa);
        // The 16-lane order (fp32 inputs) keeps IEEE's gradual underflow.
        EXPECT_EQ(
            kernels::linear(tinyProduct.to(torch::kFloat32), tinyWeight.to(torch::kFloat32), {}, torch::kFloat32, isa)
                .item<float>(),
            std::ldexp(1.0f, -130))
            << kernels::isaName(isa);
    }
    // Random inputs spanning denormals to 2^13, both signs: every path the reference's bits.
    torch::manual_seed(7);
    const torch::Tensor exponents = torch::randint(0, 141, {40, 200}, torch::kInt32);
    const torch::Tensor bits = (torch::randint(0, 2, {40, 200}, torch::kInt32) * 32768 + exponents * 128 +
                                torch::randint(0, 128, {40, 200}, torch::kInt32))
                                   .to(torch::kInt16)
                                   .view(torch::kBFloat16);
    const torch::Tensor x = bits.narrow(0, 0, 33), w = bits.narrow(0, 33, 7);
    const torch::Tensor reference = kernels::linear(x, w, {}, torch::kFloat32, Isa::Scalar);
    for (const Isa isa : vectorPaths())
        for (const int64_t rows : {1, 2, 33})
            EXPECT_TRUE(sameBits(kernels::linear(x.narrow(0, 0, rows), w, {}, torch::kFloat32, isa),
                                 reference.narrow(0, 0, rows)))
                << kernels::isaName(isa) << " rows=" << rows;
}

TEST(InvariantKernels, ALinearRowIsTheSameAloneOrInABatchOfUpTo512) {
    torch::manual_seed(2);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        const torch::Tensor batch = randomTensor({512, 67}, dtype), w = randomTensor({45, 67}, dtype);
        const torch::Tensor b = randomTensor({45}, dtype);
        const torch::Tensor all = kernels::linear(batch, w, b, dtype);
        for (const int64_t rows : {1, 2, 3, 4, 5, 8, 63, 64, 65, 200, 512}) {
            const int64_t first = (rows * 7) % (512 - rows + 1);  // the rows sit anywhere in the batch
            const torch::Tensor part = kernels::linear(batch.narrow(0, first, rows), w, b, dtype);
            EXPECT_TRUE(sameBits(part, all.narrow(0, first, rows))) << c10::toString(dtype) << " rows=" << rows;
        }
    }
}

// RoPE on every path is torch's rotate-half in fp32 (each product and the sum or difference one
// IEEE operation), rounded to the dtype; half a head of 4 (a partial vector only), 32, 40 (a whole
// vector and a partial one) and 64; in place (a decode step's) as out of place.
TEST(InvariantKernels, RopeOnEveryPathIsTorchsRotateHalf) {
    torch::manual_seed(13);
    std::vector<Isa> paths = vectorPaths();
    paths.insert(paths.begin(), Isa::Scalar);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
        for (const int64_t D : {8, 64, 80, 128}) {
            const int64_t S = 5, heads = 3, half = D / 2;
            const torch::Tensor x = randomTensor({S, heads, D}, dtype);
            const torch::Tensor invFreq = torch::rand({half});
            const kernels::RopeAngles angles = kernels::ropeAngles(invFreq, 7, S);
            const torch::Tensor c = angles.cosines.unsqueeze(1), s = angles.sines.unsqueeze(1);  // [S, 1, half]
            const torch::Tensor x1 = x.narrow(2, 0, half).to(torch::kFloat32);
            const torch::Tensor x2 = x.narrow(2, half, half).to(torch::kFloat32);
            const torch::Tensor expected = torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2).to(dtype);
            for (const Isa isa : paths) {
                const std::string where =
                    std::string(kernels::isaName(isa)) + " " + c10::toString(dtype) + " D=" + std::to_string(D);
                EXPECT_TRUE(sameBits(kernels::rope(x, angles, isa), expected)) << where;
                torch::Tensor inPlace = x.clone();
                kernels::ropeInto(inPlace.data_ptr(), inPlace.data_ptr(), dtype == torch::kBFloat16, S, heads, D,
                                  angles.cosines.data_ptr<float>(), angles.sines.data_ptr<float>(), isa);
                EXPECT_TRUE(sameBits(inPlace, expected)) << where << " in place";
            }
        }
}

// A decode step's query reads the keys where they lie (dotTile), a prefill's queries read them laid
// out 16 side by side (scoresOfKeysInLanes): the same order, on every path. Heads per KV head 2, 7
// (the AVX-512 path scores 4, then 3, together) and 6 (4, then 2); 37 keys end in a partial block;
// head sizes 24 (a partial step of 16 features), 64 and 80.
TEST(InvariantKernels, AQueryAttendsTheSameAloneOrWithOthers) {
    torch::manual_seed(3);
    std::vector<Isa> paths = vectorPaths();
    paths.insert(paths.begin(), Isa::Scalar);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
        for (const auto& [Q, KV, D] : {std::tuple<int64_t, int64_t, int64_t>{4, 2, 24}, {14, 2, 64}, {6, 1, 80}})
            for (const Isa isa : paths) {
                const int64_t T = 37;
                const std::string where = std::string(kernels::isaName(isa)) + " " + c10::toString(dtype) +
                                          " Q=" + std::to_string(Q) + " D=" + std::to_string(D);
                const torch::Tensor q = randomTensor({T, Q, D}, dtype);
                const torch::Tensor keys = randomTensor({KV, 64, D}, dtype), values = randomTensor({KV, 64, D}, dtype);
                // One call for all T queries (a prefill) against T calls of one query each (decode
                // steps), and chunks of 5 (a chunked prefill).
                const torch::Tensor prefill =
                    kernels::attention(q, keys.narrow(1, 0, T), values.narrow(1, 0, T), 0, isa);
                for (int64_t p = 0; p < T; ++p) {
                    const torch::Tensor step = kernels::attention(q.narrow(0, p, 1), keys.narrow(1, 0, p + 1),
                                                                  values.narrow(1, 0, p + 1), p, isa);
                    ASSERT_TRUE(sameBits(step, prefill.narrow(0, p, 1))) << where << " position " << p;
                }
                for (int64_t start = 0; start < T; start += 5) {
                    const int64_t S = std::min<int64_t>(5, T - start);
                    const torch::Tensor chunk = kernels::attention(q.narrow(0, start, S), keys.narrow(1, 0, start + S),
                                                                   values.narrow(1, 0, start + S), start, isa);
                    ASSERT_TRUE(sameBits(chunk, prefill.narrow(0, start, S))) << where << " chunk at " << start;
                }
            }
}

TEST(InvariantKernels, ResultsDoNotDependOnTheThreadCount) {
    torch::manual_seed(4);
    const test::ThreadCountGuard restoreThreads;
    const torch::Tensor x = randomTensor({33, 301}, torch::kBFloat16), w = randomTensor({517, 301}, torch::kBFloat16);
    const torch::Tensor q = randomTensor({9, 4, 32}, torch::kBFloat16);
    const torch::Tensor kv = randomTensor({2, 9, 32}, torch::kBFloat16);
    const torch::Tensor invFreq = torch::rand({16});
    auto compute = [&] {
        return std::vector<torch::Tensor>{kernels::linear(x, w, {}, torch::kBFloat16),
                                          kernels::rmsNorm(x, x[0], 1e-5),
                                          kernels::attention(q, kv, kv, 0),
                                          kernels::siluGate(x, x),
                                          kernels::rope(q, invFreq, 3),
                                          kernels::add(x, x)};
    };
    at::set_num_threads(1);
    const auto one = compute();
    at::set_num_threads(2);
    const auto two = compute();
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(sameBits(one[i], two[i])) << "op " << i;
}

// The elementwise steps run inside the kernels' threads, reading and writing bf16 themselves; they
// must round as torch's ops did when they were separate: the bias added to the fp32 sum and cast,
// the norm's cast(x * scale) times the weight, RoPE and SiLU-gate computed in fp32 and cast.
TEST(InvariantKernels, FusedCastsRoundAsTorchsOpsDo) {
    torch::manual_seed(10);
    for (const int64_t rows : {1, 3, 40}) {
        const torch::Tensor x = randomTensor({rows, 903}, torch::kBFloat16),
                            w = randomTensor({77, 903}, torch::kBFloat16);
        const torch::Tensor b = randomTensor({77}, torch::kBFloat16);
        const torch::Tensor sums = kernels::linear(x, w, {}, torch::kFloat32);
        EXPECT_TRUE(
            sameBits(kernels::linear(x, w, b, torch::kBFloat16), (sums + b.to(torch::kFloat32)).to(torch::kBFloat16)));
        EXPECT_TRUE(sameBits(kernels::linear(x, w, b, torch::kFloat32), sums + b.to(torch::kFloat32)));
        EXPECT_TRUE(sameBits(kernels::linear(x, w, {}, torch::kBFloat16), sums.to(torch::kBFloat16)));

        for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
            const torch::Tensor h = randomTensor({rows, 903}, dtype), weight = randomTensor({903}, dtype);
            const torch::Tensor hf = h.to(torch::kFloat32).contiguous();
            torch::Tensor scale = torch::empty({rows, 1});
            for (int64_t r = 0; r < rows; ++r)
                scale[r][0] =
                    1.0f /
                    std::sqrt(kernels::kernelPath(kernels::bestIsa()).sumOfSquares(hf[r].data_ptr<float>(), 903) /
                                  903.0f +
                              1e-6f);
            EXPECT_TRUE(sameBits(kernels::rmsNorm(h, weight, 1e-6), weight * (hf * scale).to(dtype)))
                << c10::toString(dtype) << " rows=" << rows;
            const torch::Tensor block = randomTensor({rows, 903}, dtype);
            EXPECT_TRUE(sameBits(kernels::add(h, block), h + block)) << c10::toString(dtype) << " rows=" << rows;
        }
        const torch::Tensor q = randomTensor({rows, 4, 24}, torch::kBFloat16), invFreq = torch::rand({12});
        EXPECT_TRUE(sameBits(kernels::rope(q, invFreq, 7),
                             kernels::rope(q.to(torch::kFloat32), invFreq, 7).to(torch::kBFloat16)));
        const torch::Tensor gate = randomTensor({rows, 300}, torch::kBFloat16),
                            up = randomTensor({rows, 300}, torch::kBFloat16);
        EXPECT_TRUE(sameBits(kernels::siluGate(gate, up),
                             kernels::siluGate(gate.to(torch::kFloat32), up.to(torch::kFloat32)).to(torch::kBFloat16)));
    }
}

// The pool under the kernels: a call from inside a part, or two threads computing linears at once,
// runs whole on its caller's thread, with the same bits (kernel_threads_test.cpp tests the pool).
TEST(KernelThreads, NestedAndConcurrentCallsRunOnTheirOwnThread) {
    const test::ThreadCountGuard restoreThreads;
    at::set_num_threads(2);
    std::atomic<int64_t> inner{0};
    kernels::parallelFor(4, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
            kernels::parallelFor(10, 1, [&](int64_t b, int64_t e) { inner += e - b; });
    });
    EXPECT_EQ(inner, 40);
    // Two threads computing linears at once (the GUI's analysis and session decode): the same bits.
    torch::manual_seed(8);
    const torch::Tensor x = randomTensor({1, 301}, torch::kBFloat16), w = randomTensor({777, 301}, torch::kBFloat16);
    const torch::Tensor expected = kernels::linear(x, w, {}, torch::kFloat32);
    std::vector<std::thread> callers;
    std::atomic<int> mismatches{0};
    for (int t = 0; t < 2; ++t)
        callers.emplace_back([&] {
            for (int i = 0; i < 50; ++i)
                if (!sameBits(kernels::linear(x, w, {}, torch::kFloat32), expected)) ++mismatches;
        });
    for (auto& c : callers) c.join();
    EXPECT_EQ(mismatches, 0);
}

TEST(InvariantKernels, CloseToFloat64) {
    torch::manual_seed(5);
    const torch::Tensor x = torch::randn({6, 903}), w = torch::randn({20, 903});
    const torch::Tensor exact = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
    const torch::Tensor got = kernels::linear(x, w, {}, torch::kFloat32).to(torch::kFloat64);
    EXPECT_LT((got - exact).abs().max().item<double>(), 1e-4 * exact.abs().max().item<double>());

    const int64_t T = 11, D = 24;
    const torch::Tensor q = torch::randn({T, 2, D}), k = torch::randn({1, T, D}), v = torch::randn({1, T, D});
    const torch::Tensor qd = q.to(torch::kFloat64).transpose(0, 1), kd = k.to(torch::kFloat64),
                        vd = v.to(torch::kFloat64);  // [2, T, D], [1, T, D]
    torch::Tensor scores = torch::matmul(qd, kd.transpose(1, 2)) / std::sqrt(static_cast<double>(D));  // [2, T, T]
    scores = scores.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
    const torch::Tensor expected = torch::matmul(torch::softmax(scores, -1), vd).transpose(0, 1).reshape({T, 2 * D});
    const torch::Tensor attended = kernels::attention(q, k, v, 0).to(torch::kFloat64);
    EXPECT_LT((attended - expected).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace kvscope
