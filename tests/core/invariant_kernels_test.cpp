// SPDX-License-Identifier: MIT
// The batch-invariant kernels on their own: every vector path equals the scalar reference bit for
// bit, a row's result does not depend on the rows computed with it or on the thread count, and the
// results are close to float64 arithmetic.
#include "core/kernels/invariant.h"
#include "core/kernels/invariant_ops.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace kvscope {
namespace {

using kernels::Isa;

// The vector paths this CPU can run, besides the scalar reference.
std::vector<Isa> vectorPaths() {
    std::vector<Isa> paths;
    if (kernels::bestIsa() == Isa::Avx512) paths = {Isa::Avx2, Isa::Avx512};
    if (kernels::bestIsa() == Isa::Avx2) paths = {Isa::Avx2};
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
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        for (const int64_t in : kInputSizes) {
            // From 24 rows the AVX2 path computes the order as an outer product over panels of 16
            // outputs (invariant_impl.h's panelLinear): 37 outputs end in a ragged panel.
            for (const int64_t rows : {1, 2, 3, 5, 9, 24, 31, 64}) {
                const int64_t outputs = rows < 24 ? 13 : 37;
                const torch::Tensor x = randomTensor({rows, in}, dtype), w = randomTensor({outputs, in}, dtype);
                const torch::Tensor reference = kernels::linear(x, w, {}, torch::kFloat32, Isa::Scalar);
                for (const Isa isa : vectorPaths())
                    EXPECT_TRUE(sameBits(kernels::linear(x, w, {}, torch::kFloat32, isa), reference))
                        << kernels::isaName(isa) << " linear, " << c10::toString(dtype) << " in=" << in
                        << " rows=" << rows;
                const torch::Tensor normWeight = randomTensor({in}, dtype);
                const torch::Tensor normed = kernels::rmsNorm(x, normWeight, 1e-6, Isa::Scalar);
                for (const Isa isa : vectorPaths())
                    EXPECT_TRUE(sameBits(kernels::rmsNorm(x, normWeight, 1e-6, isa), normed)) << kernels::isaName(isa);
            }
        }
        for (const int64_t D : {8, 24, 64, 80}) {
            const int64_t S = 7, start = 5, KV = 2, Q = 6;
            const torch::Tensor q = randomTensor({S, Q, D}, dtype);
            const torch::Tensor keys = randomTensor({KV, 40, D}, dtype).narrow(1, 0, start + S);
            const torch::Tensor values = randomTensor({KV, 40, D}, dtype).narrow(1, 0, start + S);
            const torch::Tensor reference = kernels::attention(q, keys, values, start, Isa::Scalar);
            for (const Isa isa : vectorPaths())
                EXPECT_TRUE(sameBits(kernels::attention(q, keys, values, start, isa), reference))
                    << kernels::isaName(isa) << " attention, " << c10::toString(dtype) << " D=" << D;
        }
    }
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

TEST(InvariantKernels, AQueryAttendsTheSameAloneOrWithOthers) {
    torch::manual_seed(3);
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        const int64_t T = 37, KV = 2, Q = 4, D = 24;
        const torch::Tensor q = randomTensor({T, Q, D}, dtype);
        const torch::Tensor keys = randomTensor({KV, 64, D}, dtype), values = randomTensor({KV, 64, D}, dtype);
        // One call for all T queries (a prefill) against T calls of one query each (decode steps),
        // and chunks of 5 (a chunked prefill).
        const torch::Tensor prefill = kernels::attention(q, keys.narrow(1, 0, T), values.narrow(1, 0, T), 0);
        for (int64_t p = 0; p < T; ++p) {
            const torch::Tensor step =
                kernels::attention(q.narrow(0, p, 1), keys.narrow(1, 0, p + 1), values.narrow(1, 0, p + 1), p);
            ASSERT_TRUE(sameBits(step, prefill.narrow(0, p, 1))) << c10::toString(dtype) << " position " << p;
        }
        for (int64_t start = 0; start < T; start += 5) {
            const int64_t S = std::min<int64_t>(5, T - start);
            const torch::Tensor chunk = kernels::attention(q.narrow(0, start, S), keys.narrow(1, 0, start + S),
                                                           values.narrow(1, 0, start + S), start);
            ASSERT_TRUE(sameBits(chunk, prefill.narrow(0, start, S))) << c10::toString(dtype) << " chunk at " << start;
        }
    }
}

TEST(InvariantKernels, ResultsDoNotDependOnTheThreadCount) {
    torch::manual_seed(4);
    const int before = at::get_num_threads();
    const torch::Tensor x = randomTensor({33, 301}, torch::kBFloat16), w = randomTensor({517, 301}, torch::kBFloat16);
    const torch::Tensor q = randomTensor({9, 4, 32}, torch::kBFloat16);
    const torch::Tensor kv = randomTensor({2, 9, 32}, torch::kBFloat16);
    const torch::Tensor invFreq = torch::rand({16});
    auto compute = [&] {
        return std::vector<torch::Tensor>{kernels::linear(x, w, {}, torch::kBFloat16), kernels::rmsNorm(x, x[0], 1e-5),
                                          kernels::attention(q, kv, kv, 0), kernels::siluGate(x, x),
                                          kernels::rope(q, invFreq, 3)};
    };
    at::set_num_threads(1);
    const auto one = compute();
    at::set_num_threads(2);
    const auto two = compute();
    at::set_num_threads(before);
    for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(sameBits(one[i], two[i])) << "op " << i;
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
                        vd = v.to(torch::kFloat64);                                        // [2, T, D], [1, T, D]
    torch::Tensor scores = torch::matmul(qd, kd.transpose(1, 2)) / std::sqrt(static_cast<double>(D));  // [2, T, T]
    scores = scores.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
    const torch::Tensor expected = torch::matmul(torch::softmax(scores, -1), vd).transpose(0, 1).reshape({T, 2 * D});
    const torch::Tensor attended = kernels::attention(q, k, v, 0).to(torch::kFloat64);
    EXPECT_LT((attended - expected).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace kvscope
