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
torch::Tensor rope(const torch::Tensor& x, const RopeAngles& angles, Isa isa = bestIsa());
// The same at positions [start, start+S) (invFreq: [D/2]).
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start, Isa isa = bestIsa());
// q: [S, Q, D] (after RoPE)  keys, values: [KV, T, D] views of the cache (T = start + S)  ->  [S, Q*D]
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values, int64_t start,
                        Isa isa = bestIsa());
// gate, up: [S, I]  ->  cast(silu(gate) * up), silu(g) = g / (1 + e^-g) by the kernels' exp
torch::Tensor siluGate(const torch::Tensor& gate, const torch::Tensor& up, Isa isa = bestIsa());
// x, a: [S, H] of one dtype  ->  cast(x + a), torch's residual add: a new tensor (x stays as it was)
torch::Tensor add(const torch::Tensor& x, const torch::Tensor& a, Isa isa = bestIsa());

// ---- The same ops on memory the caller owns ---------------------------------------------------
// What the tensor ops above compute (they call these), without a torch op: a decode step's row runs
// on these (Transformer's decode step). bf16 arrays as raw uint16 bits, fp32 as floats, named by a
// `bf16` flag; every array contiguous. Each torch op costs microseconds of dispatch and allocation
// whose code and bookkeeping the step's weight stream has evicted from the caches
// (docs/history/kernel-measurements.md, "Torch ops in a decode step").

// One projection of linearsInto: y[:, o] = sum over in of x[:, i] w[o, i] (+ bias[o]).
struct LinearInto {
    const void* weight = nullptr;  // [out, in]
    bool weightBf16 = false;
    int64_t out = 0;
    const void* bias = nullptr;    // [out], or null
    bool biasBf16 = false;
    float* sums = nullptr;         // [S, out] fp32: the result itself where `output` is null
    void* output = nullptr;        // [S, out] in the output dtype; null for fp32 without a bias
};
// linears() on raw rows: x is bf16 only where every weight is (the pair order), fp32 otherwise.
void linearsInto(const void* x, bool xBf16, int64_t S, int64_t in, const std::vector<LinearInto>& projections,
                 bool outBf16, Isa isa = bestIsa(), LinearOrder order = LinearOrder::Pairs);
// rmsNorm() over `rows` rows of n; weight in the rows' dtype.
void rmsNormInto(const void* x, const void* weight, void* out, bool bf16, int64_t rows, int64_t n, double eps,
                 Isa isa = bestIsa());
// rope() of x [S, heads, D] at the angles' S positions ([S, D/2] each).
void ropeInto(const void* x, void* out, bool bf16, int64_t S, int64_t heads, int64_t D, const float* cosines,
              const float* sines, Isa isa = bestIsa());
// attention() into fp32 out [S, Q * D]: q fp32 [S, Q, D], keys and values [KV, *, D] of the cache's
// dtype, KV head h at + h * headStride elements.
void attentionInto(const float* q, const void* keys, const void* values, bool bf16, int64_t headStride, int64_t S,
                   int64_t start, int64_t Q, int64_t KV, int64_t D, float* out, Isa isa = bestIsa());
// siluGate() over n elements.
void siluGateInto(const void* gate, const void* up, void* out, bool bf16, int64_t n, Isa isa = bestIsa());
// out[i] = cast(x[i] + a[i]), the residual add as torch's (one fp32 add, rounded to the dtype); out
// may be x.
void addInto(const void* x, const void* a, void* out, bool bf16, int64_t n, Isa isa = bestIsa());
// out[i] = x[i] widened exactly to fp32; out[i] = cast(x[i]) rounded to the dtype.
void widenInto(const void* x, bool bf16, float* out, int64_t n);
void roundInto(const float* x, void* out, bool bf16, int64_t n);

}  // namespace kvscope::kernels
