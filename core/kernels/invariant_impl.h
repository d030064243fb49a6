// SPDX-License-Identifier: MIT
#pragma once
// The batch-invariant kernels written once, over a 16-lane vector type V that each instruction-set
// file supplies (invariant_scalar.cpp, invariant_avx2.cpp, invariant_avx512*.cpp). V provides:
//   V::zero(), V::load(const float*), V::load(const uint16_t* bf16), V::broadcast(float),
//   V::fma(a, b, acc) = a*b + acc rounded once, v.sum() = the fixed lane tree, v.store(float*),
//   per lane: V::add, sub, mul, max and min (as MAXPS / MINPS: b where a comparison fails),
//   V::pow2(n) = 2^n for integral n in [-126, 127], V::zeroBelow(x, limit, y) = x < limit ? 0 : y,
//   V::kRows x V::kCols: the tile of (rows x outputs) accumulators that fits its registers,
//   V::kDecodeCols, V::kDecodePairCols: outputs per tile for a single row, in either order,
//   V::kValueRows: how many queries' attention sums (4 chains each) fit its registers at once,
//   V::kPanelFromRows: from how many rows linear runs as panelLinear (0: never), V::kPanelForPairs:
//   whether the laid-out pair order does, with V::Wide (an output vector: kWidth, zero, broadcast,
//   load, fma, add, store) and V::kPanelRows rows per tile,
//   V::Pairs: the pair order's step (invariant.h) on 32 bf16 elements, Chunk load(const uint16_t*)
//   and V dot(x, w, acc); EmulatedPairs<V> below (two FMAs, from V::loadOdd and V::loadEven) or
//   the dot-product instruction, with V::kNativePairs saying which.
// Included only by those files, each compiled for its instruction set. Everything here has internal
// linkage (the anonymous namespace) and calls no inline function of the standard library: an inline
// function instantiated in the AVX-512 file is a weak symbol the linker may pick for the whole
// program, and would then run AVX-512 code on a CPU without it.
#include "core/kernels/invariant.h"

#include <stdlib.h>  // malloc, free
#include <string.h>  // memcpy
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>  // _mm_getcsr, _mm_setcsr (always-inline builtins, no symbols)
#endif

namespace kvscope::kernels::impl {
namespace {

constexpr int64_t kLanes = 16;

inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

// A partial chunk of the reduction, zero-padded to 16 lanes (the order pads every reduction so).
template <typename V, typename Element>
V loadPadded(const Element* p, int64_t n) {
    Element buffer[kLanes] = {};
    memcpy(buffer, p, static_cast<size_t>(n) * sizeof(Element));
    return V::load(buffer);
}

// The pair order on a path without a bf16 dot-product instruction: the odd elements' products, then
// the even ones', as two FMAs per lane (run under FlushDenormals, which makes them the instruction's).
template <typename V>
struct EmulatedPairs {
    struct Chunk {
        V odd, even;
    };
    static Chunk load(const uint16_t* p) { return {V::loadOdd(p), V::loadEven(p)}; }
    static V dot(const Chunk& x, const Chunk& w, const V& acc) {
        return V::fma(x.even, w.even, V::fma(x.odd, w.odd, acc));
    }
};

// The pair order's denormal rule: flush-to-zero and denormals-are-zero for the MXCSR of the calling
// thread while it lives (VDPBF16PS flushes whatever the MXCSR says; FMAs and the tree's adds do when
// it says so). Elsewhere than x86 there is no vector path to agree with, and nothing is flushed.
class FlushDenormals {
public:
#if defined(__x86_64__) || defined(__i386__)
    FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
    ~FlushDenormals() { _mm_setcsr(saved_); }

private:
    static constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
    unsigned saved_;
#else
    FlushDenormals() = default;
#endif
};

// How dotTile walks a reduction. LaneSteps: the 16-lane order, 16 elements a step, one FMA per lane
// (fp32 inputs, or bf16 weights widened exactly). PairSteps: the pair order, 32 bf16 elements a step.
template <typename V>
struct LaneSteps {
    static constexpr int64_t kWidth = kLanes;
    template <typename Element>
    static V load(const Element* p) {
        return V::load(p);
    }
    template <typename Element>
    static V loadPadded(const Element* p, int64_t n) {
        return impl::loadPadded<V>(p, n);
    }
    static V step(const V& x, const V& w, const V& acc) { return V::fma(x, w, acc); }
};

template <typename V>
struct PairSteps {
    static constexpr int64_t kWidth = 2 * kLanes;
    using Chunk = typename V::Pairs::Chunk;
    static Chunk load(const uint16_t* p) { return V::Pairs::load(p); }
    static Chunk loadPadded(const uint16_t* p, int64_t n) {
        uint16_t buffer[kWidth] = {};
        memcpy(buffer, p, static_cast<size_t>(n) * sizeof(uint16_t));
        return load(buffer);
    }
    static V step(const Chunk& x, const Chunk& w, const V& acc) { return V::Pairs::dot(x, w, acc); }
};

// out[r * C + c] = dot(x[r], w[c]) over n elements, R x C dot products sharing each load, in the
// order of Steps. With `prefetch`, the C * n elements from there are fetched towards the cache along
// the way, at the pace the tile reads its own (a decode step's next weight rows: each row alone is
// too short a stream for the hardware prefetcher to ramp up, which halved the bandwidth from memory).
template <typename V, int R, int C, typename Steps, typename XElement, typename WElement>
void dotTile(const XElement* const* x, const WElement* const* w, int64_t n, float* out,
             const WElement* prefetch = nullptr) {
    // The R x C accumulators must live in registers: every loop over them is unrolled (GCC keeps
    // an array indexed in a loop on the stack at -O2, a load and store around every FMA).
    V acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
    using WChunk = decltype(Steps::load(w[0]));
    auto step = [&](const WChunk* wv, auto loadX) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const auto xv = loadX(r);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[r][c] = Steps::step(xv, wv[c], acc[r][c]);
        }
    };
    constexpr int64_t kStep = Steps::kWidth, kLine = 64 / sizeof(WElement);  // kLine: elements per cache line
    int64_t i = 0;
    for (; i + kStep <= n; i += kStep) {
        if (prefetch)
            for (int64_t e = 0; e < C * kStep; e += kLine) __builtin_prefetch(prefetch + i * C + e, 0, 3);
        WChunk wv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) wv[c] = Steps::load(w[c] + i);
        step(wv, [&](int r) { return Steps::load(x[r] + i); });
    }
    if (i < n) {
        WChunk wv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) wv[c] = Steps::loadPadded(w[c] + i, n - i);
        step(wv, [&](int r) { return Steps::loadPadded(x[r] + i, n - i); });
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) out[r * C + c] = acc[r][c].sum();
}

// Rows are taken in blocks that stay in L2 while every output tile of [o0, o1) passes over them, so
// the weights are streamed rows/kRowBlock times. A tile past the last row or output repeats the last
// one (and discards it): each element's order stays the same whatever tile it lands in, and so
// whatever order the tiles run in.
//
// A single row (a decode step) reads each weight once, from memory: there the outputs are taken as
// kDecodeStreams interleaved runs of tiles, so that each thread keeps that many sequential streams
// in flight. One stream is held back by how many misses one core's prefetchers keep outstanding:
// measured on a 2-core Sapphire Rapids VM, the 272 MB bf16 lm_head streamed at 23-24 GB/s with one,
// 29 with two, 29 with four (the read probe, one stream per thread, 27).
constexpr int64_t kDecodeStreams = 2;

template <typename V, int R, int C, typename Steps, typename XElement, typename Element>
void linearTiles(const XElement* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    constexpr int64_t kRowBlock = 64;
    const int64_t tiles = (o1 - o0 + C - 1) / C;
    const int64_t streams = rows == 1 ? smaller(kDecodeStreams, tiles) : 1;
    const int64_t tilesPerStream = (tiles + streams - 1) / streams;
    for (int64_t rb = 0; rb < rows; rb += kRowBlock) {
        const int64_t rowEnd = smaller(rows, rb + kRowBlock);
        for (int64_t k = 0; k < tilesPerStream * streams; ++k) {  // tile k / streams of each stream
            const int64_t stream = k % streams, index = stream * tilesPerStream + k / streams;
            if (index >= tiles) continue;
            const int64_t o = o0 + index * C, streamEnd = smaller(o1, o0 + (stream + 1) * tilesPerStream * C);
            const Element* wp[C];
            for (int c = 0; c < C; ++c) wp[c] = w + smaller(o + c, o1 - 1) * in;
            // Rows are contiguous: the stream's next tile reads the weights after this one's. Only
            // a single row fetches them ahead (more rows reuse them from the cache).
            const Element* next = rows == 1 && o + 2 * C <= streamEnd ? w + (o + C) * in : nullptr;
            for (int64_t r = rb; r < rowEnd; r += R) {
                const XElement* xp[R];
                for (int j = 0; j < R; ++j) xp[j] = x + smaller(r + j, rowEnd - 1) * in;
                float tile[R * C];
                dotTile<V, R, C, Steps>(xp, wp, in, tile, next);
                for (int j = 0; j < R && r + j < rowEnd; ++j)
                    for (int c = 0; c < C && o + c < o1; ++c) y[(r + j) * yStride + o + c] = tile[j * C + c];
            }
        }
    }
}

inline float widened(float value) { return value; }
inline float widened(uint16_t bf16) {  // bf16 is the top half of an fp32: exact
    const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

// The same order for many rows, computed as an outer product. Lane j of output (r, o) is the chain
// of FMAs over inputs j, j+16, j+32, ... (zero-padded) from 0; here the chains of one lane advance
// together for a tile of R rows x 2W outputs (W: an output vector type, W::kWidth outputs side by
// side), one weight load per W outputs and one broadcast per row feeding 2R FMAs, where dotTile
// needs one 16-lane accumulator per output and loads of both operands for every FMA pair. Each
// chain sees the same FMAs in the same order, and the 16 lanes are then summed by the same tree,
// so the bits are dotTile's (the kernel tests hold this path to the scalar reference).
//   panel: the 2W weight rows of a tile, widened to fp32 and laid out [lane j][step t][output c]
//          = w[o + c][16 t + j], zero-padded, so that one lane streams contiguously from L2
//   part:  [lane j][row][output], the chains' ends, summed by the tree
// The reduction goes in chunks of kChunk steps, all 16 lanes per chunk, so the rows' inputs that a
// chunk reads (R x kChunk cache lines) stay in L1 while every lane passes over them.
template <typename V, typename Element>
void panelLinear(const float* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    using W = typename V::Wide;
    constexpr int R = V::kPanelRows, P = 2 * W::kWidth;
    constexpr int64_t kChunk = 32;
    const int64_t T = (in + kLanes - 1) / kLanes;  // steps per lane
    float* panel = static_cast<float*>(malloc(static_cast<size_t>(kLanes * T * P) * sizeof(float)));
    if (!panel)
        return linearTiles<V, V::kRows, V::kCols, LaneSteps<V>>(x, rows, in, w, y, yStride, o0, o1);  // same bits
    for (int64_t o = o0; o < o1; o += P) {
        for (int c = 0; c < P; ++c) {  // each weight row read once, in order (the panel stays in L2)
            const Element* row = o + c < o1 ? w + (o + c) * in : nullptr;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < kLanes; ++j) {
                    const int64_t i = t * kLanes + j;
                    panel[(j * T + t) * P + c] = row && i < in ? widened(row[i]) : 0.0f;
                }
        }
        for (int64_t r = 0; r < rows; r += R) {
            const float* xs[R];
            for (int k = 0; k < R; ++k) xs[k] = x + smaller(r + k, rows - 1) * in;
            float part[kLanes][R][P];
            for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
                const int64_t t1 = smaller(T, t0 + kChunk);
                for (int64_t j = 0; j < kLanes; ++j) {
                    W acc[R][2];
#pragma GCC unroll 16
                    for (int k = 0; k < R; ++k)
#pragma GCC unroll 2
                        for (int h = 0; h < 2; ++h)
                            acc[k][h] = t0 == 0 ? W::zero() : W::load(&part[j][k][h * W::kWidth]);
                    // A lane past the input's end would add padding, 0 * 0: that leaves any sum
                    // as it was (a chain that starts at +0 is never -0), so it is not done.
                    const int64_t end = t1 == T && (T - 1) * kLanes + j >= in ? T - 1 : t1;
                    for (int64_t t = t0; t < end; ++t) {
                        const float* wp = panel + (j * T + t) * P;
                        const W w0 = W::load(wp), w1 = W::load(wp + W::kWidth);
#pragma GCC unroll 16
                        for (int k = 0; k < R; ++k) {
                            const W b = W::broadcast(xs[k][t * kLanes + j]);
                            acc[k][0] = W::fma(b, w0, acc[k][0]);
                            acc[k][1] = W::fma(b, w1, acc[k][1]);
                        }
                    }
#pragma GCC unroll 16
                    for (int k = 0; k < R; ++k)
#pragma GCC unroll 2
                        for (int h = 0; h < 2; ++h) acc[k][h].store(&part[j][k][h * W::kWidth]);
                }
            }
            for (int k = 0; k < R && r + k < rows; ++k)
                for (int h = 0; h < 2; ++h) {  // the tree: +8, +4, +2, +1, one output vector at a time
                    W s[8];
                    for (int j = 0; j < 8; ++j)
                        s[j] = W::add(W::load(&part[j][k][h * W::kWidth]), W::load(&part[j + 8][k][h * W::kWidth]));
                    for (int j = 0; j < 4; ++j) s[j] = W::add(s[j], s[j + 4]);
                    for (int j = 0; j < 2; ++j) s[j] = W::add(s[j], s[j + 2]);
                    float sums[W::kWidth];
                    W::add(s[0], s[1]).store(sums);
                    for (int c = 0; c < W::kWidth && o + h * W::kWidth + c < o1; ++c)
                        y[(r + k) * yStride + o + h * W::kWidth + c] = sums[c];
                }
        }
    }
    free(panel);
}

template <typename V, typename Element>
void linear(const float* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1) {
    if constexpr (V::kPanelFromRows > 0) {
        if (rows >= V::kPanelFromRows) return panelLinear<V>(x, rows, in, w, y, yStride, o0, o1);
    }
    if (rows >= V::kRows)
        linearTiles<V, V::kRows, V::kCols, LaneSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
    else
        linearTiles<V, 1, V::kDecodeCols, LaneSteps<V>>(x, rows, in, w, y, yStride, o0, o1);  // a decode step's one row
}

// The pair order's input, laid out for the 16-lane order (invariant.h): each row widened to fp32,
// zero-padded to a multiple of 32 elements, each chunk of 32 as its 16 odd elements, then its 16
// even ones. `out` holds rows x pairedLength(in) floats.
inline int64_t pairedLength(int64_t in) { return (in + 2 * kLanes - 1) / (2 * kLanes) * (2 * kLanes); }
inline void layOutPairs(const uint16_t* x, int64_t rows, int64_t in, float* out) {
    const int64_t padded = pairedLength(in);
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* row = x + r * in;
        float* dst = out + r * padded;
        for (int64_t chunk = 0; chunk < padded; chunk += 2 * kLanes, dst += 2 * kLanes) {
            if (chunk + 2 * kLanes <= in) {
                for (int64_t j = 0; j < kLanes; ++j) {
                    dst[j] = widened(row[chunk + 2 * j + 1]);
                    dst[kLanes + j] = widened(row[chunk + 2 * j]);
                }
                continue;
            }
            for (int64_t j = 0; j < kLanes; ++j) {  // the last chunk, zero-padded
                const int64_t odd = chunk + 2 * j + 1, even = chunk + 2 * j;
                dst[j] = odd < in ? widened(row[odd]) : 0.0f;
                dst[kLanes + j] = even < in ? widened(row[even]) : 0.0f;
            }
        }
    }
}

// The pair order. With the instruction, or for a few rows, as dotTiles over 32-element steps; many
// rows without it, as the 16-lane order over laid-out copies (whose cost, a few bytes per weight,
// the tiles' FMAs on widened weights earn back), in blocks of outputs that keep the copy small.
template <typename V>
void linearPairs(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    const FlushDenormals flushed;
    constexpr int64_t kLaidOutFromRows = 32, kOutputBlock = 128;
    if (V::kNativePairs || rows < kLaidOutFromRows) {
        if (rows >= V::kRows)
            return linearTiles<V, V::kRows, V::kCols, PairSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
        return linearTiles<V, 1, V::kDecodePairCols, PairSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
    }
    const int64_t padded = pairedLength(in);
    float* xs = static_cast<float*>(malloc(static_cast<size_t>(rows * padded) * sizeof(float)));
    float* ws = static_cast<float*>(malloc(static_cast<size_t>(kOutputBlock * padded) * sizeof(float)));
    if (xs && ws) {
        layOutPairs(x, rows, in, xs);
        for (int64_t o = o0; o < o1; o += kOutputBlock) {
            const int64_t block = smaller(kOutputBlock, o1 - o);
            layOutPairs(w + o * in, block, in, ws);
            if constexpr (V::kPanelForPairs)
                panelLinear<V>(xs, rows, padded, ws, y + o, yStride, 0, block);
            else
                linear<V>(xs, rows, padded, ws, y + o, yStride, 0, block);
        }
    } else {  // out of memory: the same bits, slower
        linearTiles<V, V::kRows, V::kCols, PairSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
    }
    free(xs);
    free(ws);
}

// e^x, the same operations on every path: the kernels call no C library's expf, whose bits differ
// between libraries (and in glibc between its FMA and SSE2 variants, picked by CPU). x = n ln2 + r
// with n = nearest(x log2e) (adding 1.5 * 2^23 rounds it), r by two FMAs (Cody and Waite's split
// of ln2), e^r by a degree-6 polynomial (Cephes' expf coefficients; within 2 ulp of e^x, tested),
// scaled by 2^n. Below ln(FLT_MIN) the result is 0 (no subnormal results); x is clamped to 88
// (e^88 = 1.65e38) against overflow: softmax passes x <= 0, SiLU -g, where g / (1 + e^-g) is below
// 1e-36 from there on. A NaN stays a NaN (MINPS keeps its second operand, x, when unordered).
template <typename V>
V expOf(const V& x) {
    const V clamped = V::min(V::broadcast(88.0f), x);
    const V rounder = V::broadcast(12582912.0f);  // 1.5 * 2^23
    const V n = V::sub(V::fma(clamped, V::broadcast(1.44269504088896341f), rounder), rounder);
    V r = V::fma(n, V::broadcast(-0.693359375f), clamped);
    r = V::fma(n, V::broadcast(2.12194440e-4f), r);
    V p = V::broadcast(1.9875691500e-4f);
    p = V::fma(p, r, V::broadcast(1.3981999507e-3f));
    p = V::fma(p, r, V::broadcast(8.3334519073e-3f));
    p = V::fma(p, r, V::broadcast(4.1665795894e-2f));
    p = V::fma(p, r, V::broadcast(1.6666665459e-1f));
    p = V::fma(p, r, V::broadcast(5.0000001201e-1f));
    const V er = V::add(V::fma(p, V::mul(r, r), r), V::broadcast(1.0f));
    return V::zeroBelow(x, -87.33654475f, V::mul(er, V::pow2(n)));
}

// y[i] = e^(x[i] - shift) for i in [0, n), 16 at a time (x and y may be the same array).
template <typename V>
void exps(const float* x, float shift, float* y, int64_t n) {
    const V by = V::broadcast(shift);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) expOf<V>(V::sub(V::load(x + i), by)).store(y + i);
    if (i == n) return;
    float buffer[kLanes] = {};
    memcpy(buffer, x + i, static_cast<size_t>(n - i) * sizeof(float));
    expOf<V>(V::sub(V::load(buffer), by)).store(buffer);
    memcpy(y + i, buffer, static_cast<size_t>(n - i) * sizeof(float));
}

// The largest of x[0, n). Any order finds the same one, so 16 lanes compare side by side (a chain of
// one compare per key was 14% of attention's time). A NaN among them makes every output of the
// softmax NaN whichever value this returns.
template <typename V>
float largest(const float* x, int64_t n) {
    V top = V::broadcast(x[0]);
    int64_t t = 0;
    for (; t + kLanes <= n; t += kLanes) top = V::max(top, V::load(x + t));
    float lanes[kLanes];
    top.store(lanes);
    float best = lanes[0];
    for (int64_t j = 1; j < kLanes; ++j) best = lanes[j] > best ? lanes[j] : best;
    for (; t < n; ++t) best = x[t] > best ? x[t] : best;
    return best;
}

// Feature blocks of 16 a weighted sum advances side by side per query (a head of 64 features: 4
// chains together instead of 4 passes, each one FMA latency per key).
constexpr int kValueBlocks = 4;

// acc[r][b] = sum over keys t in order of weights[r][t] * values[t * D + 16 b + lane]: R queries'
// B chains each, side by side in registers, every value vector loaded once for the R queries (with
// a run-time block count the compiler kept the chains on the stack, a store and a load around every
// FMA; with R > 1 they are R x B independent chains instead of B latency-bound ones).
template <typename V, int R, int B, typename Element>
void sumValues(const float* const* weights, const Element* values, int64_t D, int64_t n, V (*acc)[B]) {
    V sums[R][B];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int b = 0; b < B; ++b) sums[r][b] = V::zero();
    for (int64_t t = 0; t < n; ++t) {
        V v[B];
#pragma GCC unroll 8
        for (int b = 0; b < B; ++b) v[b] = V::load(values + t * D + b * kLanes);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const V p = V::broadcast(weights[r][t]);
#pragma GCC unroll 8
            for (int b = 0; b < B; ++b) sums[r][b] = V::fma(p, v[b], sums[r][b]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int b = 0; b < B; ++b) acc[r][b] = sums[r][b];
}

// Features [from, D) of one query's weighted sum, divided by its total: the same chains as
// sumValues, up to kValueBlocks at a time, the last one zero-padded (a head size that is not a
// multiple of kValueBlocks * 16 ends here).
template <typename V, typename Element>
void sumValuesFrom(int64_t from, const float* weights, const Element* values, int64_t D, int64_t n, float total,
                   float* out) {
    constexpr int64_t kBlocks = kValueBlocks;
    for (int64_t d0 = from; d0 < D; d0 += kBlocks * kLanes) {
        const int64_t full = smaller(kBlocks, (D - d0) / kLanes);  // whole 16-feature blocks
        const int64_t tail = full < kBlocks ? smaller(kLanes, D - d0 - full * kLanes) : 0;  // then a partial one
        V acc[kBlocks];
#pragma GCC unroll 4
        for (int64_t b = 0; b < kBlocks; ++b) acc[b] = V::zero();
        for (int64_t t = 0; t < n; ++t) {
            const Element* v = values + t * D + d0;
            const V p = V::broadcast(weights[t]);
#pragma GCC unroll 4
            for (int64_t b = 0; b < kBlocks; ++b)
                if (b < full) acc[b] = V::fma(p, V::load(v + b * kLanes), acc[b]);
            if (tail > 0) acc[full] = V::fma(p, loadPadded<V>(v + full * kLanes, tail), acc[full]);
        }
        for (int64_t b = 0; b < full + (tail > 0 ? 1 : 0); ++b) {
            float lanes[kLanes];
            acc[b].store(lanes);
            const int64_t width = b < full ? kLanes : tail;
            for (int64_t j = 0; j < width; ++j) out[d0 + b * kLanes + j] = lanes[j] / total;
        }
    }
}

// R queries' weighted sums over the whole blocks of kValueBlocks * 16 features in [0, D), divided by
// their totals; returns where those blocks end.
template <typename V, int R, typename Element>
int64_t sumValuesInBlocks(const float* const* weights, const Element* values, int64_t D, int64_t n, const float* totals,
                          float* const* out) {
    constexpr int64_t kBlock = kValueBlocks * kLanes;
    int64_t d0 = 0;
    for (; d0 + kBlock <= D; d0 += kBlock) {
        V acc[R][kValueBlocks];
        sumValues<V, R, kValueBlocks>(weights, values + d0, D, n, acc);
        for (int r = 0; r < R; ++r)
            for (int b = 0; b < kValueBlocks; ++b) {
                float lanes[kLanes];
                acc[r][b].store(lanes);
                for (int64_t j = 0; j < kLanes; ++j) out[r][d0 + b * kLanes + j] = lanes[j] / totals[r];
            }
    }
    return d0;
}

// `count` (query row s, head) pairs, heads h0, h0 + 1, ... of one KV head, up to V::kRows of them:
// for each, scores over keys 0..start+s, softmax (max, then exp and sum in key order), then the
// weighted sum of values accumulated per feature in key order and divided by the sum. Each key and
// value row is read once for the group; every pair's reductions are the chains it has alone.
template <typename V, typename Element>
void attentionGroup(const AttentionArgs<Element>& a, int64_t s, int64_t h0, int64_t count, float* scratch) {
    constexpr int R = V::kRows;
    static_assert(R <= kAttentionScratchRows, "the callers' scratch holds kAttentionScratchRows rows of scores");
    const int64_t D = a.D, n = a.start + s + 1, kvHead = h0 / (a.Q / a.KV);
    const Element* keys = a.keys + kvHead * a.headStride;
    const Element* values = a.values + kvHead * a.headStride;
    const float* q[R];
    float* scores[R];
    float* out[R];
    for (int r = 0; r < R; ++r) {  // rows past `count` repeat the last one and are not stored
        const int64_t pair = s * a.Q + h0 + smaller(r, count - 1);
        q[r] = a.q + pair * D;
        scores[r] = scratch + smaller(r, count - 1) * n;
        out[r] = a.out + pair * D;
    }

    constexpr int kKeys = 4;  // keys per tile: R x 4 independent accumulators
    for (int64_t t = 0; t < n; t += kKeys) {
        const Element* kp[kKeys];
        for (int c = 0; c < kKeys; ++c) kp[c] = keys + smaller(t + c, n - 1) * D;
        float tile[R * kKeys];
        dotTile<V, R, kKeys, LaneSteps<V>>(q, kp, D, tile);
        for (int64_t r = 0; r < count; ++r)
            for (int c = 0; c < kKeys && t + c < n; ++c) scores[r][t + c] = tile[r * kKeys + c] * a.scale;
    }
    for (int64_t r = 0; r < count; ++r) exps<V>(scores[r], largest<V>(scores[r], n), scores[r], n);
    // Each query's sum in key order, the R sums interleaved: one add's latency a key for all of them.
    float totals[R] = {};
    for (int64_t t = 0; t < n; ++t)
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) totals[r] += scores[r][t];

    // The whole blocks for V::kValueRows queries at once where their chains fit the registers, else
    // one by one; then any features past the last whole block.
    int64_t r = 0;
    if constexpr (V::kValueRows > 1) {
        for (; r + V::kValueRows <= count; r += V::kValueRows) {
            const int64_t rest = sumValuesInBlocks<V, V::kValueRows>(scores + r, values, D, n, totals + r, out + r);
            for (int k = 0; k < V::kValueRows; ++k)
                sumValuesFrom<V>(rest, scores[r + k], values, D, n, totals[r + k], out[r + k]);
        }
    }
    for (; r < count; ++r) {
        const int64_t rest = sumValuesInBlocks<V, 1>(scores + r, values, D, n, totals + r, out + r);
        sumValuesFrom<V>(rest, scores[r], values, D, n, totals[r], out[r]);
    }
}

// The pairs [begin, end) of [S rows x Q heads], pair = row * Q + head, in groups of up to V::kRows
// heads of one row that share a KV head.
template <typename V, typename Element>
void attention(const AttentionArgs<Element>& a, int64_t begin, int64_t end, float* scratch) {
    const int64_t heads = a.Q / a.KV;  // query heads per KV head
    for (int64_t pair = begin; pair < end;) {
        const int64_t s = pair / a.Q, h = pair % a.Q;
        const int64_t sameKvHead = (h / heads + 1) * heads - h;  // this head and the next ones of its KV head
        const int64_t count = smaller(smaller(V::kRows, sameKvHead), end - pair);
        attentionGroup<V>(a, s, h, count, scratch);
        pair += count;
    }
}

template <typename V>
void triad(float* a, const float* b, const float* c, float s, int64_t n) {
    const V scale = V::broadcast(s);
    for (int64_t i = 0; i < n; i += kLanes) V::fma(scale, V::load(c + i), V::load(b + i)).store(a + i);
}

// `streams` equal parts of x read side by side, 64 floats of each in turn (n: a multiple of 64 *
// streams), four independent sums: as many sequential streams as a decode step keeps in flight.
template <typename V>
float readAll(const float* x, int64_t n, int64_t streams) {
    const V one = V::broadcast(1.0f);
    const int64_t part = n / streams;
    V acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    for (int64_t i = 0; i < part; i += 4 * kLanes)
        for (int64_t s = 0; s < streams; ++s)
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) acc[k] = V::fma(V::load(x + s * part + i + k * kLanes), one, acc[k]);
    return acc[0].sum() + acc[1].sum() + acc[2].sum() + acc[3].sum();
}

// Chains of V::kRows x V::kCols accumulators, the count the linear tile keeps busy, each advanced
// `rounds` times by the same step; the FMAs cannot be merged (fp32 is not associative, and nothing
// here is contracted), so every one is executed.
template <typename V>
int64_t multiplyAdds(int64_t rounds, bool pairs, float* sink) {
    constexpr int kChains = V::kRows * V::kCols;
    V acc[kChains];
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = V::zero();
    uint16_t small[2 * kLanes];  // 2^-20: sums that stay finite however long the probe runs
    for (uint16_t& e : small) e = 0x35C0;
    if (pairs) {
        const auto x = V::Pairs::load(small);
        for (int64_t i = 0; i < rounds; ++i)
#pragma GCC unroll 16
            for (int c = 0; c < kChains; ++c) acc[c] = V::Pairs::dot(x, x, acc[c]);
    } else {
        const V x = V::load(small);
        for (int64_t i = 0; i < rounds; ++i)
#pragma GCC unroll 16
            for (int c = 0; c < kChains; ++c) acc[c] = V::fma(x, x, acc[c]);
    }
    float total = 0;
    for (int c = 0; c < kChains; ++c) total += acc[c].sum();
    *sink = total;
    return rounds * kChains * (pairs ? 2 : 1) * kLanes;
}

template <typename V>
float sumOfSquares(const float* x, int64_t n) {
    float out = 0;
    dotTile<V, 1, 1, LaneSteps<V>>(&x, &x, n, &out);
    return out;
}

}  // namespace
}  // namespace kvscope::kernels::impl

// The entry points of one instruction-set path, namespace `ns`, on vector type `V` (declared again
// in invariant_dispatch.cpp). Used once at the end of each invariant_*.cpp, in kvscope::kernels.
#define KVSCOPE_DEFINE_KERNEL_PATH(ns, V)                                                                              \
    namespace ns {                                                                                                     \
    void linear(const float* x, int64_t rows, int64_t in, const float* w, float* y, int64_t yStride, int64_t o0,       \
                int64_t o1) {                                                                                          \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1);                                                           \
    }                                                                                                                  \
    void linear(const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,    \
                int64_t o1) {                                                                                          \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1);                                                           \
    }                                                                                                                  \
    void linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0, \
                int64_t o1) {                                                                                          \
        impl::linearPairs<V>(x, rows, in, w, y, yStride, o0, o1);                                                      \
    }                                                                                                                  \
    void attention(const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {                         \
        impl::attention<V>(a, begin, end, scores);                                                                     \
    }                                                                                                                  \
    void attention(const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {                      \
        impl::attention<V>(a, begin, end, scores);                                                                     \
    }                                                                                                                  \
    float sumOfSquares(const float* x, int64_t n) { return impl::sumOfSquares<V>(x, n); }                              \
    void exps(const float* x, float shift, float* y, int64_t n) { impl::exps<V>(x, shift, y, n); }                     \
    void triad(float* a, const float* b, const float* c, float s, int64_t n) { impl::triad<V>(a, b, c, s, n); }        \
    float readAll(const float* x, int64_t n, int64_t streams) { return impl::readAll<V>(x, n, streams); }              \
    int64_t multiplyAdds(int64_t rounds, bool pairs, float* sink) {                                                    \
        return impl::multiplyAdds<V>(rounds, pairs, sink);                                                             \
    }                                                                                                                  \
    int64_t panelFromRows() { return V::kPanelFromRows; }                                                              \
    }
