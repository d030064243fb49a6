// SPDX-License-Identifier: MIT
#pragma once
// The transformer's ops on the batch-invariant kernels (invariant.h), on CPU tensors of the compute
// dtype (fp32 or bf16). Each op's bits for a row depend only on that row's inputs (and, for
// attention, the keys it sees), never on how many rows share the call or on the thread count.
//
// Reductions run in the kernels' fixed order; everything else is one IEEE operation per element
// (torch's elementwise add, multiply and dtype casts round the same in their vector and scalar
// loops) or a libm call made here per element (exp, sin, cos: torch's vectorised versions give
// other bits than its scalar tails, so they are not used). Where the result is bf16, values are
// rounded to bf16 where transformers' eager modules round (after each linear, norm and the RoPE
// product) but sums stay fp32 inside a kernel.
#include "core/kernels/invariant.h"

#include <torch/types.h>

#include <vector>

namespace kvscope::kernels {

// x: [S, in]  w: [out, in]  b: [out] or undefined  ->  [S, out] in `outType`
// bf16 x and w take `order` (invariant.h); anything else the 16-lane order.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, torch::ScalarType outType,
                     Isa isa = bestIsa(), LinearOrder order = LinearOrder::Pairs);
// Several projections of the same x (q, k, v; gate, up) in one parallel region: the same bits as
// one linear() each, fewer thread wake-ups and longer streams for a decode step.
struct Projection {
    torch::Tensor weight, bias;  // [out, in], [out] or undefined
};
std::vector<torch::Tensor> linears(const torch::Tensor& x, const std::vector<Projection>& projections,
                                   torch::ScalarType outType, Isa isa = bestIsa(),
                                   LinearOrder order = LinearOrder::Pairs);
// x: [..., n]  weight: [n]  ->  like x. weight * cast(x * rsqrt(mean(x^2) + eps)), as HF's RMSNorm.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, Isa isa = bestIsa());
// RoPE's cos and sin for the positions [start, start+S): [S, D/2] fp32 each, of position * invFreq
// in fp32. A forward computes them once for all its layers' queries and keys.
struct RopeAngles {
    torch::Tensor cosines, sines;
};
RopeAngles ropeAngles(const torch::Tensor& invFreq, int64_t start, int64_t S);
// x: [S, heads, D]  ->  rotated at the angles' positions (rotate-half)
torch::Tensor rope(const torch::Tensor& x, const RopeAngles& angles);
// The same at positions [start, start+S) (invFreq: [D/2]).
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start);
// q: [S, Q, D] (after RoPE)  keys, values: [KV, T, D] views of the cache (T = start + S)  ->  [S, Q*D]
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values, int64_t start,
                        Isa isa = bestIsa());
// gate, up: [S, I]  ->  cast(silu(gate) * up), silu(g) = g / (1 + e^-g) by the kernels' exp
torch::Tensor siluGate(const torch::Tensor& gate, const torch::Tensor& up, Isa isa = bestIsa());

}  // namespace kvscope::kernels
