// SPDX-License-Identifier: MIT
#include "core/kernels/invariant_ops.h"

#include "core/kernels/kernel_threads.h"
#include "core/util/error.h"

#include <cmath>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace kvscope::kernels {
namespace {

// A path's kernels for the element type `p` points at: fp32, or bf16 as raw bits.
template <typename Element>
const ElementKernels<std::remove_const_t<Element>>& kernelsFor(const KernelPath& path, Element* p) {
    (void)p;
    return path.of<std::remove_const_t<Element>>();
}

torch::Tensor asFloat(const torch::Tensor& t) { return t.to(torch::kFloat32).contiguous(); }

void requireCpuFloat(const torch::Tensor& t, const char* what) {
    if (!t.device().is_cpu() || (t.scalar_type() != torch::kFloat32 && t.scalar_type() != torch::kBFloat16))
        throw UsageError(std::string("--kernels invariant: ") + what + " must be an fp32 or bf16 CPU tensor (got " +
                         c10::toString(t.scalar_type()) + " on " + t.device().str() + ")");
}

// Splits [0, n) between the kernels' threads (as many as --threads), none with fewer than `grain`.
template <typename Work>
void parallel(int64_t n, int64_t grain, const Work& work, int64_t steal = 0) {
    parallelFor(n, grain, [&](int64_t begin, int64_t end) { work(begin, end); }, steal);
}

// Calls f with a value of the C++ element type of `dtype` (fp32 or bf16). The elementwise steps
// below read and write tensors in their own dtype inside the kernels' threads instead of as separate
// torch casts and products: a decode step's ops on a few thousand elements each cost more in
// dispatch than in arithmetic (docs/history/kernel-measurements.md, "Elementwise steps"). The arithmetic is the one the torch ops did: widen exactly to fp32, one IEEE
// operation, round to the dtype (c10::BFloat16: nearest even, as torch's casts round).
template <typename F>
void withElement(torch::ScalarType dtype, const F& f) {
    if (dtype == torch::kBFloat16)
        f(c10::BFloat16{});
    else
        f(float{});
}

// The same for the rows of the functions on raw memory, whose dtype a `bf16` flag names.
template <typename F>
void withElement(bool bf16, const F& f) {
    withElement(bf16 ? torch::kBFloat16 : torch::kFloat32, f);
}

// An element pointer as the kernels take it: bf16 as raw uint16 bits, fp32 as is.
inline const float* bits(const float* p) { return p; }
inline float* bits(float* p) { return p; }
inline const uint16_t* bits(const c10::BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* bits(c10::BFloat16* p) { return reinterpret_cast<uint16_t*>(p); }

// out[:, o0:o1] = cast(sums[:, o0:o1] + bias[o0:o1]): the bias added to the fp32 sum (one rounding),
// then one rounding to the output's dtype.
void finish(const float* sums, int64_t S, const LinearInto& p, bool outBf16, int64_t o0, int64_t o1, Isa isa) {
    const int64_t width = p.out, n = o1 - o0;
    const KernelPath& table = kernelPath(isa);
    if (outBf16) {
        for (int64_t r = 0; r < S; ++r) {
            const int64_t at = r * width + o0;
            uint16_t* op = static_cast<uint16_t*>(p.output) + at;
            if (!p.bias)
                table.f32.finishSums(sums + at, nullptr, op, n);
            else if (p.biasBf16)
                table.bf16.finishSums(sums + at, static_cast<const uint16_t*>(p.bias) + o0, op, n);
            else
                table.f32.finishSums(sums + at, static_cast<const float*>(p.bias) + o0, op, n);
        }
        return;
    }
    float* op = static_cast<float*>(p.output);  // fp32 with a bias (fp32 without one needs no finishing)
    auto addBias = [&](const auto* bias) {
        for (int64_t r = 0; r < S; ++r)
            for (int64_t o = o0; o < o1; ++o) op[r * width + o] = sums[r * width + o] + static_cast<float>(bias[o]);
    };
    if (p.biasBf16)
        addBias(static_cast<const c10::BFloat16*>(p.bias));
    else
        addBias(static_cast<const float*>(p.bias));
}

// The rows of a many-row linear packed once, the threads splitting the tiles, for every projection
// and thread of the call (null where `path` packs none for so many rows): each thread had packed
// all of them for its own outputs, and in a prefill's sequence of products down_proj's copies
// (10 MB each for 512 rows) no longer sat in the cache when its panels read them. pairOrder: bf16
// rows in the pair order, otherwise fp32 rows.
std::unique_ptr<float[]> packRowsOnce(const void* x, bool pairOrder, int64_t S, int64_t in, Isa path) {
    const KernelPath& table = kernelPath(path);
    const int64_t floats = table.packedRowsFloats(S, in, pairOrder);
    if (floats == 0) return nullptr;
    std::unique_ptr<float[]> packed(new (std::nothrow) float[static_cast<std::size_t>(floats)]);
    if (!packed) return nullptr;  // the kernels pack for themselves
    parallel(table.packedRowTiles(S), 1, [&](int64_t begin, int64_t end) {
        if (pairOrder)
            table.bf16.packRowTiles(static_cast<const uint16_t*>(x), S, in, begin, end, packed.get());
        else
            table.f32.packRowTiles(static_cast<const float*>(x), S, in, begin, end, packed.get());
    });
    return packed;
}

}  // namespace

void linearsInto(const void* x, bool xBf16, int64_t S, int64_t in, const std::vector<LinearInto>& projections,
                 bool outBf16, Isa isa, LinearOrder order) {
    bool pairs = xBf16;
    for (const LinearInto& p : projections) pairs = pairs && p.weightBf16;
    if (xBf16 && !pairs) throw UsageError("--kernels invariant: a bf16 row takes bf16 weights only (widen it first)");
    // Threads take whole blocks of 64 output features, so a feature's sum never crosses threads;
    // the blocks of every projection form one range, split in one parallel region. A thread done
    // with its part takes blocks from the end of the other's (kernel_threads.h): two threads do not
    // finish together, streaming from memory (a single row) or on a VM's two cores, which need not
    // run at one speed (many rows): docs/history/kernel-measurements.md, "Linear blocks stolen".
    // Many rows steal two blocks at a time: 4 of a panel path's panels.
    constexpr int64_t kBlock = 64, kStealBlocks = 1, kStealBlocksOfManyRows = 2;
    std::vector<int64_t> firstBlock = {0};  // per projection
    for (const LinearInto& p : projections) firstBlock.push_back(firstBlock.back() + (p.out + kBlock - 1) / kBlock);
    const Isa path = pairs ? pairsPathForRows(isa, S) : isa;
    const bool tiles = pairs && order == LinearOrder::Tiles;  // the tile order packs its rows its own way
    const std::unique_ptr<float[]> packed = tiles ? nullptr : packRowsOnce(x, pairs, S, in, path);
    const KernelPath& table = kernelPath(path);
    auto computeBlocks = [&](int64_t begin, int64_t end) {
        for (std::size_t m = 0; m < projections.size(); ++m) {
            const int64_t from = std::max(begin, firstBlock[m]), to = std::min(end, firstBlock[m + 1]);
            if (from >= to) continue;
            const LinearInto& p = projections[m];
            const int64_t o0 = (from - firstBlock[m]) * kBlock, o1 = std::min(p.out, (to - firstBlock[m]) * kBlock);
            const auto* w16 = static_cast<const uint16_t*>(p.weight);
            if (tiles)
                linearTiles(bestTilePath(), static_cast<const uint16_t*>(x), S, in, w16, p.sums, p.out, o0, o1);
            else if (pairs)
                table.linearPairs(static_cast<const uint16_t*>(x), S, in, w16, p.sums, p.out, o0, o1, packed.get());
            else if (p.weightBf16)
                table.bf16.linear(static_cast<const float*>(x), S, in, w16, p.sums, p.out, o0, o1, packed.get());
            else
                table.f32.linear(static_cast<const float*>(x), S, in, static_cast<const float*>(p.weight), p.sums,
                                 p.out, o0, o1, packed.get());
            if (p.output) finish(p.sums, S, p, outBf16, o0, o1, isa);
        }
    };
    parallel(firstBlock.back(), 1, computeBlocks, S == 1 ? kStealBlocks : kStealBlocksOfManyRows);
}

std::vector<torch::Tensor> linears(const torch::Tensor& x, const std::vector<Projection>& projections,
                                   torch::ScalarType outType, Isa isa, LinearOrder order) {
    requireCpuFloat(x, "a linear layer's input");
    const int64_t S = x.size(0), in = x.size(1);
    // bf16 inputs and bf16 weights (a bf16 model's every linear) take `order`: the pair order, the
    // order of the CPU's bf16 dot product where it has one, or the tile order, AMX's (invariant.h);
    // anything else the 16-lane order.
    bool pairs = x.scalar_type() == torch::kBFloat16;
    for (const Projection& p : projections) {
        requireCpuFloat(p.weight, "a weight");
        pairs = pairs && p.weight.scalar_type() == torch::kBFloat16;
    }
    const torch::Tensor xs = pairs ? x.contiguous() : asFloat(x);  // [S, in]
    // 16-lane order, many rows: they reuse every weight many times, so bf16 weights are widened to
    // fp32 once (exact, so the same bits) instead of in every tile, as long as a tile's weight rows
    // still fit L1 in fp32 (wider inputs stay bf16: measured slower widened). The copy costs ~6
    // bytes per weight, a few percent of a prefill's time. A path that packs panels of its own
    // widens them there; the pair order lays its weights out itself (invariant_impl.h).
    constexpr int64_t kWidenFromRows = 32, kWidenUpToInputs = 2048;
    const bool widen = !pairs && S >= kWidenFromRows && in <= kWidenUpToInputs && !widensWeightsItself(isa, S);
    std::vector<torch::Tensor> kept, outputs;  // kept: the weights, biases and sums the kernels read and write
    std::vector<LinearInto> raw;
    for (const Projection& p : projections) {
        const torch::Tensor w = widen ? asFloat(p.weight) : p.weight.contiguous();  // [out, in]
        if (p.bias.defined()) requireCpuFloat(p.bias, "a bias");
        const torch::Tensor bias = p.bias.defined() ? p.bias.contiguous() : p.bias;  // [out]
        const int64_t out = w.size(0);
        torch::Tensor sums = torch::empty({S, out}, torch::kFloat32);  // [S, out]
        // fp32 without a bias: the sums are the result; otherwise they are finished into it.
        const bool finished = outType != torch::kFloat32 || bias.defined();
        outputs.push_back(finished ? torch::empty({S, out}, outType) : sums);  // [S, out]
        raw.push_back({w.data_ptr(), w.scalar_type() == torch::kBFloat16, out,
                       bias.defined() ? bias.data_ptr() : nullptr,
                       bias.defined() && bias.scalar_type() == torch::kBFloat16, sums.data_ptr<float>(),
                       finished ? outputs.back().data_ptr() : nullptr});
        kept.insert(kept.end(), {w, bias, sums});
    }
    linearsInto(xs.data_ptr(), pairs, S, in, raw, outType == torch::kBFloat16, isa, order);
    return outputs;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, torch::ScalarType outType,
                     Isa isa, LinearOrder order) {
    return linears(x, {{w, b}}, outType, isa, order).front();
}

void rmsNormInto(const void* x, const void* weight, void* out, bool bf16, int64_t rows, int64_t n, double eps,
                 Isa isa) {
    const KernelPath& table = kernelPath(isa);
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        const T* xp = static_cast<const T*>(x);
        const T* wp = static_cast<const T*>(weight);
        T* op = static_cast<T*>(out);
        parallel(rows, 16, [&](int64_t begin, int64_t end) {
            std::vector<float> row(static_cast<std::size_t>(n));  // [n] fp32
            for (int64_t r = begin; r < end; ++r) {
                widenInto(xp + r * n, bf16, row.data(), n);
                const float scale = 1.0f / std::sqrt(table.sumOfSquares(row.data(), n) / static_cast<float>(n) +
                                                     static_cast<float>(eps));
                kernelsFor(table, bits(wp)).scaleByWeight(row.data(), scale, bits(wp), bits(op + r * n), n);
            }
        });
    });
}

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps, Isa isa) {
    requireCpuFloat(x, "a norm's input");
    requireCpuFloat(weight, "a norm's weight");
    if (weight.scalar_type() != x.scalar_type())
        throw UsageError("--kernels invariant: a norm's weight must have its input's dtype");
    const int64_t n = x.size(-1);
    const torch::Tensor xc = x.contiguous(), wc = weight.contiguous();  // [rows, n], [n]
    torch::Tensor out = torch::empty_like(xc);  // like x
    const int64_t rows = n > 0 ? xc.numel() / n : 0;
    rmsNormInto(xc.data_ptr(), wc.data_ptr(), out.data_ptr(), x.scalar_type() == torch::kBFloat16, rows, n, eps, isa);
    return out;
}

RopeAngles ropeAngles(const torch::Tensor& invFreq, int64_t start, int64_t S) {
    const torch::Tensor freq = asFloat(invFreq);  // [D/2]
    const int64_t half = freq.numel();
    RopeAngles angles{torch::empty({S, half}, torch::kFloat32), torch::empty({S, half}, torch::kFloat32)};
    const float* fp = freq.data_ptr<float>();
    float* cp = angles.cosines.data_ptr<float>();
    float* sp = angles.sines.data_ptr<float>();
    for (int64_t s = 0; s < S; ++s) {
        const float position = static_cast<float>(start + s);
        for (int64_t i = 0; i < half; ++i) {
            const float angle = position * fp[i];
            cp[s * half + i] = std::cos(angle);
            sp[s * half + i] = std::sin(angle);
        }
    }
    return angles;
}

void ropeInto(const void* x, void* out, bool bf16, int64_t S, int64_t heads, int64_t D, const float* cosines,
              const float* sines, Isa isa) {
    const int64_t half = D / 2;
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        const T* xp = static_cast<const T*>(x);
        T* op = static_cast<T*>(out);
        parallel(S, 1, [&](int64_t begin, int64_t end) {
            const int64_t at = begin * heads * D;
            kernelsFor(kernelPath(isa), bits(xp))
                .rope(bits(xp + at), bits(op + at), end - begin, heads, D, cosines + begin * half,
                      sines + begin * half);
        });
    });
}

torch::Tensor rope(const torch::Tensor& x, const RopeAngles& angles, Isa isa) {
    requireCpuFloat(x, "RoPE's input");
    const int64_t S = x.size(0), heads = x.size(1), D = x.size(2), half = D / 2;
    if (angles.cosines.size(0) != S || angles.cosines.size(1) != half)
        throw UsageError("--kernels invariant: RoPE's angles do not match its input's rows and head size");
    const torch::Tensor xc = x.contiguous();  // [S, heads, D]
    torch::Tensor out = torch::empty_like(xc);  // [S, heads, D]
    ropeInto(xc.data_ptr(), out.data_ptr(), x.scalar_type() == torch::kBFloat16, S, heads, D,
             angles.cosines.data_ptr<float>(), angles.sines.data_ptr<float>(), isa);
    return out;
}

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start, Isa isa) {
    return rope(x, ropeAngles(invFreq, start, x.size(0)), isa);
}

// The keys [0, n) of each KV head laid out as AttentionArgs::keysInLanes says: for a prefill's
// queries, which all read them, once a call (n x D x KV moves against n x D x Q x S multiply-adds).
// bf16 keys are widened exactly, as widenInto does.
std::vector<float> keysInLanes(const void* keys, bool bf16, int64_t headStride, int64_t KV, int64_t n, int64_t D) {
    constexpr int64_t kBlock = kKeysSideBySide;
    const int64_t blocks = (n + kBlock - 1) / kBlock, perHead = blocks * kBlock * D;
    std::vector<float> laidOut(static_cast<std::size_t>(KV * perHead));  // zeros past the last key
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        parallel(KV * blocks, 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                const int64_t head = i / blocks, block = i % blocks;
                float* out = laidOut.data() + head * perHead + block * kBlock * D;
                for (int64_t c = 0; c < kBlock && block * kBlock + c < n; ++c) {
                    const T* key = static_cast<const T*>(keys) + head * headStride + (block * kBlock + c) * D;
                    for (int64_t d = 0; d < D; ++d) out[d * kBlock + c] = static_cast<float>(key[d]);
                }
            }
        });
    });
    return laidOut;
}

void attentionInto(const float* q, const void* keys, const void* values, bool bf16, int64_t headStride, int64_t S,
                   int64_t start, int64_t Q, int64_t KV, int64_t D, float* out, Isa isa) {
    auto run = [&](auto element) {
        using Element = decltype(element);
        AttentionArgs<Element> a;
        a.q = q;
        a.keys = static_cast<const Element*>(keys);
        a.values = static_cast<const Element*>(values);
        a.headStride = headStride;
        a.out = out;
        a.S = S, a.start = start, a.Q = Q, a.KV = KV, a.D = D;
        a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
        // A decode step's one query reads the keys where they are (fetching them ahead).
        const std::vector<float> laidOut =
            S > 1 ? keysInLanes(keys, bf16, headStride, KV, start + S, D) : std::vector<float>{};
        if (!laidOut.empty()) {
            a.keysInLanes = laidOut.data();
            a.keysInLanesStride = static_cast<int64_t>(laidOut.size()) / KV;
        }
        // A decode step's one query row: its (row, head) pairs split in equal parts, no stealing
        // (its heads cost alike; stealing had cut a thread's 7 heads of one KV head into groups of
        // 4, 2 and 1, each reading the keys and values again: docs/history/kernel-measurements.md,
        // "Decode attention").
        if (S == 1) {
            parallel(Q, 1, [&](int64_t begin, int64_t end) {
                std::vector<float> scores(static_cast<std::size_t>(kAttentionScratchRows * (start + S)));
                kernelPath(isa).of<Element>().attention(a, begin, end, scores.data());
            });
            return;
        }
        // Several rows go out in units of one row's heads of one KV head, each a group that reads
        // its keys and values once (split and stolen at any pair, as items of single pairs, groups
        // had been cut down to one query each). A row's cost grows with its position, so the rows
        // are taken from both ends in turn (0, S-1, 1, S-2, ...): equal halves of the units then
        // cost alike, and a thread done early takes units from the other's end (kernel_threads.h),
        // for cores that run at unequal speeds (docs/history/kernel-measurements.md, "Prefill
        // attention units").
        const int64_t headsPerKv = Q / KV;
        parallel(
            S * KV, 1,
            [&](int64_t begin, int64_t end) {
                std::vector<float> scores(static_cast<std::size_t>(kAttentionScratchRows * (start + S)));
                for (int64_t unit = begin; unit < end; ++unit) {
                    const int64_t i = unit / KV, row = i % 2 == 0 ? i / 2 : S - 1 - i / 2;
                    const int64_t firstPair = row * Q + unit % KV * headsPerKv;  // pair = row * Q + head
                    kernelPath(isa).of<Element>().attention(a, firstPair, firstPair + headsPerKv, scores.data());
                }
            },
            1);
    };
    if (bf16)
        run(uint16_t{});
    else
        run(float{});
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values, int64_t start,
                        Isa isa) {
    requireCpuFloat(q, "attention's queries");
    const int64_t S = q.size(0), Q = q.size(1), D = q.size(2), KV = keys.size(0);
    if (keys.stride(2) != 1 || keys.stride(1) != D || values.strides() != keys.strides() ||
        keys.scalar_type() != values.scalar_type())
        throw UsageError("--kernels invariant: keys and values must be cache views with rows of D contiguous features");
    const torch::Tensor qf = asFloat(q);  // [S, Q, D]
    torch::Tensor out = torch::empty({S, Q, D}, torch::kFloat32);  // [S, Q, D]
    attentionInto(qf.data_ptr<float>(), keys.data_ptr(), values.data_ptr(), keys.scalar_type() == torch::kBFloat16,
                  keys.stride(0), S, start, Q, KV, D, out.data_ptr<float>(), isa);
    return out.view({S, Q * D}).to(q.scalar_type());
}

namespace {

// out[i] = step(x[i], a[i]) over n elements of one dtype, split across the kernels' threads; step:
// one of the kernels' elementwise steps, called on raw bf16 bits or floats.
template <typename Step>
void eachPairInto(const void* x, const void* a, void* out, bool bf16, int64_t n, const Step& step) {
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        const T *xp = static_cast<const T*>(x), *ap = static_cast<const T*>(a);
        T* op = static_cast<T*>(out);
        parallel(n, 4096, [&](int64_t begin, int64_t end) {
            step(bits(xp + begin), bits(ap + begin), bits(op + begin), end - begin);
        });
    });
}

// A new tensor of step(x[i], a[i]) (eachPairInto) for two tensors of one dtype and shape; `what`
// names them in the errors.
template <typename Step>
torch::Tensor eachPair(const torch::Tensor& x, const torch::Tensor& a, const char* what, const Step& step) {
    requireCpuFloat(x, what);
    if (a.scalar_type() != x.scalar_type() || a.sizes() != x.sizes())
        throw UsageError(std::string("--kernels invariant: ") + what + " differ in dtype or shape");
    const torch::Tensor xc = x.contiguous(), ac = a.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    eachPairInto(xc.data_ptr(), ac.data_ptr(), out.data_ptr(), x.scalar_type() == torch::kBFloat16, xc.numel(), step);
    return out;
}

auto siluGateStep(Isa isa) {
    return [isa](auto gate, auto up, auto out, int64_t n) {
        kernelsFor(kernelPath(isa), gate).siluGate(gate, up, out, n);
    };
}
auto addStep(Isa isa) {
    return [isa](auto x, auto a, auto out, int64_t n) { kernelsFor(kernelPath(isa), x).add(x, a, out, n); };
}

}  // namespace

void siluGateInto(const void* gate, const void* up, void* out, bool bf16, int64_t n, Isa isa) {
    eachPairInto(gate, up, out, bf16, n, siluGateStep(isa));
}
torch::Tensor siluGate(const torch::Tensor& gate, const torch::Tensor& up, Isa isa) {  // [S, I] each
    return eachPair(gate, up, "the MLP's gate and up projections", siluGateStep(isa));
}

void addInto(const void* x, const void* a, void* out, bool bf16, int64_t n, Isa isa) {
    eachPairInto(x, a, out, bf16, n, addStep(isa));
}
torch::Tensor add(const torch::Tensor& x, const torch::Tensor& a, Isa isa) {  // [S, H] each
    return eachPair(x, a, "a residual add's operands", addStep(isa));
}

void widenInto(const void* x, bool bf16, float* out, int64_t n) {
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        const T* xp = static_cast<const T*>(x);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(xp[i]);
    });
}

void roundInto(const float* x, void* out, bool bf16, int64_t n) {
    withElement(bf16, [&](auto element) {
        using T = decltype(element);
        T* op = static_cast<T*>(out);
        for (int64_t i = 0; i < n; ++i) op[i] = T(x[i]);
    });
}

}  // namespace kvscope::kernels
