// SPDX-License-Identifier: MIT
#include "core/kernels/invariant_ops.h"

#include "core/kernels/kernel_threads.h"
#include "core/util/error.h"

#include <cmath>
#include <vector>

namespace kvscope::kernels {
namespace {

torch::Tensor asFloat(const torch::Tensor& t) { return t.to(torch::kFloat32).contiguous(); }

void requireCpuFloat(const torch::Tensor& t, const char* what) {
    if (!t.device().is_cpu() || (t.scalar_type() != torch::kFloat32 && t.scalar_type() != torch::kBFloat16))
        throw UsageError(std::string("--kernels invariant: ") + what + " must be an fp32 or bf16 CPU tensor (got " +
                         c10::toString(t.scalar_type()) + " on " + t.device().str() + ")");
}

// Splits [0, n) between the kernels' threads (as many as --threads), none with fewer than `grain`.
template <typename Work>
void parallel(int64_t n, int64_t grain, const Work& work) {
    parallelFor(n, grain, [&](int64_t begin, int64_t end) { work(begin, end); });
}

}  // namespace

std::vector<torch::Tensor> linears(const torch::Tensor& x, const std::vector<Projection>& projections,
                                   torch::ScalarType outType, Isa isa) {
    requireCpuFloat(x, "a linear layer's input");
    const int64_t S = x.size(0), in = x.size(1);
    // bf16 inputs and bf16 weights (a bf16 model's every linear) take the pair order, the order of
    // the CPU's bf16 dot product where it has one (invariant.h); anything else the 16-lane order.
    bool pairs = x.scalar_type() == torch::kBFloat16;
    for (const Projection& p : projections) {
        requireCpuFloat(p.weight, "a weight");
        pairs = pairs && p.weight.scalar_type() == torch::kBFloat16;
    }
    const torch::Tensor xs = pairs ? x.contiguous() : asFloat(x);                         // [S, in]
    // 16-lane order, many rows: they reuse every weight many times, so bf16 weights are widened to
    // fp32 once (exact, so the same bits) instead of in every tile, as long as a tile's weight rows
    // still fit L1 in fp32 (wider inputs stay bf16: measured slower widened). The copy costs ~6
    // bytes per weight, a few percent of a prefill's time. A path that packs panels of its own
    // widens them there; the pair order lays its weights out itself (invariant_impl.h).
    constexpr int64_t kWidenFromRows = 32, kWidenUpToInputs = 2048;
    const bool widen = !pairs && S >= kWidenFromRows && in <= kWidenUpToInputs && !widensWeightsItself(isa, S);
    // Threads take whole blocks of 64 output features, so a feature's sum never crosses threads;
    // the blocks of every projection form one range, split in one parallel region.
    constexpr int64_t kBlock = 64;
    std::vector<torch::Tensor> weights, outputs;
    std::vector<int64_t> firstBlock = {0};                                                 // per projection
    for (const Projection& p : projections) {
        weights.push_back(widen ? asFloat(p.weight) : p.weight.contiguous());               // [out, in]
        outputs.push_back(torch::empty({S, p.weight.size(0)}, torch::kFloat32));           // [S, out]
        firstBlock.push_back(firstBlock.back() + (p.weight.size(0) + kBlock - 1) / kBlock);
    }
    auto bf16 = [](const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr()); };
    parallel(firstBlock.back(), 1, [&](int64_t begin, int64_t end) {
        for (std::size_t m = 0; m < weights.size(); ++m) {
            const int64_t from = std::max(begin, firstBlock[m]), to = std::min(end, firstBlock[m + 1]);
            if (from >= to) continue;
            const torch::Tensor& w = weights[m];
            const int64_t out = w.size(0);
            const int64_t o0 = (from - firstBlock[m]) * kBlock, o1 = std::min(out, (to - firstBlock[m]) * kBlock);
            float* yp = outputs[m].data_ptr<float>();
            if (pairs)
                kernels::linear(isa, bf16(xs), S, in, bf16(w), yp, out, o0, o1);
            else if (w.scalar_type() == torch::kBFloat16)
                kernels::linear(isa, xs.data_ptr<float>(), S, in, bf16(w), yp, out, o0, o1);
            else
                kernels::linear(isa, xs.data_ptr<float>(), S, in, w.data_ptr<float>(), yp, out, o0, o1);
        }
    });
    for (std::size_t m = 0; m < outputs.size(); ++m) {
        const torch::Tensor& b = projections[m].bias;
        if (b.defined()) outputs[m] = outputs[m] + b.to(torch::kFloat32);  // one rounding of the fp32 sum
        outputs[m] = outputs[m].to(outType);
    }
    return outputs;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, torch::ScalarType outType,
                     Isa isa) {
    return linears(x, {{w, b}}, outType, isa).front();
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, Isa isa) {
    requireCpuFloat(x, "a norm's input");
    const int64_t n = x.size(-1);
    const torch::Tensor xf = asFloat(x).reshape({-1, n});                                  // [rows, n]
    const int64_t rows = xf.size(0);
    torch::Tensor scale = torch::empty({rows, 1}, torch::kFloat32);                         // [rows, 1]
    const float* xp = xf.data_ptr<float>();
    float* sp = scale.data_ptr<float>();
    parallel(rows, 16, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
            sp[r] =
                1.0f / std::sqrt(sumOfSquares(isa, xp + r * n, n) / static_cast<float>(n) + static_cast<float>(eps));
    });
    const torch::Tensor normed = (xf * scale).to(x.scalar_type()).view(x.sizes());          // like x
    return weight * normed;
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start) {
    requireCpuFloat(x, "RoPE's input");
    const int64_t S = x.size(0), heads = x.size(1), D = x.size(2), half = D / 2;
    const torch::Tensor xf = asFloat(x);                                                   // [S, heads, D]
    const torch::Tensor freq = asFloat(invFreq);                                           // [D/2]
    torch::Tensor out = torch::empty_like(xf);
    const float *xp = xf.data_ptr<float>(), *fp = freq.data_ptr<float>();
    float* op = out.data_ptr<float>();
    parallel(S, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> cosines(half), sines(half);
        for (int64_t s = begin; s < end; ++s) {
            const float position = static_cast<float>(start + s);
            for (int64_t i = 0; i < half; ++i) {
                const float angle = position * fp[i];
                cosines[i] = std::cos(angle);
                sines[i] = std::sin(angle);
            }
            for (int64_t h = 0; h < heads; ++h) {
                const float* row = xp + (s * heads + h) * D;
                float* dst = op + (s * heads + h) * D;
                for (int64_t i = 0; i < half; ++i) {  // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
                    const float x1 = row[i], x2 = row[i + half];
                    const float a = x1 * cosines[i], b = x2 * sines[i], c = x2 * cosines[i], d = x1 * sines[i];
                    dst[i] = a - b;
                    dst[i + half] = c + d;
                }
            }
        }
    });
    return out.to(x.scalar_type());
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values, int64_t start,
                        Isa isa) {
    requireCpuFloat(q, "attention's queries");
    const int64_t S = q.size(0), Q = q.size(1), D = q.size(2), KV = keys.size(0);
    if (keys.stride(2) != 1 || keys.stride(1) != D || values.strides() != keys.strides() ||
        keys.scalar_type() != values.scalar_type())
        throw UsageError("--kernels invariant: keys and values must be cache views with rows of D contiguous features");
    const torch::Tensor qf = asFloat(q);                                                   // [S, Q, D]
    torch::Tensor out = torch::empty({S, Q, D}, torch::kFloat32);                          // [S, Q, D]
    auto run = [&](auto element) {
        using Element = decltype(element);
        AttentionArgs<Element> a;
        a.q = qf.data_ptr<float>();
        a.keys = static_cast<const Element*>(keys.data_ptr());
        a.values = static_cast<const Element*>(values.data_ptr());
        a.headStride = keys.stride(0);
        a.out = out.data_ptr<float>();
        a.S = S, a.start = start, a.Q = Q, a.KV = KV, a.D = D;
        a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
        parallel(S * Q, 1, [&](int64_t begin, int64_t end) {
            std::vector<float> scores(static_cast<std::size_t>(start + S));
            kernels::attention(isa, a, begin, end, scores.data());
        });
    };
    if (keys.scalar_type() == torch::kBFloat16)
        run(uint16_t{});
    else
        run(float{});
    return out.view({S, Q * D}).to(q.scalar_type());
}

torch::Tensor siluGate(const torch::Tensor& gate, const torch::Tensor& up) {
    const torch::Tensor g = asFloat(gate), u = asFloat(up);                                // [S, I]
    torch::Tensor out = torch::empty_like(g);
    const float *gp = g.data_ptr<float>(), *upp = u.data_ptr<float>();
    float* op = out.data_ptr<float>();
    parallel(g.numel(), 4096, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float silu = gp[i] / (1.0f + std::exp(-gp[i]));
            op[i] = silu * upp[i];
        }
    });
    return out.to(gate.scalar_type());
}

}  // namespace kvscope::kernels
