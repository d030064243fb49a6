// SPDX-License-Identifier: MIT
#pragma once
// The batch-invariant kernels written once, over a 16-lane vector type V that each instruction-set
// file supplies (invariant_scalar.cpp, invariant_avx2.cpp, invariant_avx512.cpp). V provides:
//   V::zero(), V::load(const float*), V::load(const uint16_t* bf16), V::broadcast(float),
//   V::fma(a, b, acc) = a*b + acc rounded once, v.sum() = the fixed lane tree, v.store(float*),
//   V::kRows x V::kCols: the tile of (rows x outputs) accumulators that fits its registers,
//   V::kPanelFromRows: from how many rows linear runs as panelLinear (0: never), with V::Wide (an
//   output vector: zero, broadcast, load, fma, add, store) and V::kPanelRows rows per tile.
// Included only by those files, each compiled for its instruction set. Everything here has internal
// linkage (the anonymous namespace) and calls no inline function of the standard library: an inline
// function instantiated in the AVX-512 file is a weak symbol the linker may pick for the whole
// program, and would then run AVX-512 code on a CPU without it.
#include "core/kernels/invariant.h"

#include <math.h>    // expf: a libm call, not an inline wrapper
#include <stdlib.h>  // malloc, free
#include <string.h>  // memcpy

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

// out[r * C + c] = dot(x[r], w[c]) over n elements, R x C dot products sharing each load. With
// `prefetch`, the C * n elements from there are fetched towards the cache along the way, at the pace
// the tile reads its own (a decode step's next weight rows: each row alone is too short a stream
// for the hardware prefetcher to ramp up, which halved the bandwidth from memory).
template <typename V, int R, int C, typename Element>
void dotTile(const float* const* x, const Element* const* w, int64_t n, float* out, const Element* prefetch = nullptr) {
    // The R x C accumulators must live in registers: every loop over them is unrolled (GCC keeps
    // an array indexed in a loop on the stack at -O2, a load and store around every FMA).
    V acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
    auto step = [&](const V* wv, auto loadX) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const V xv = loadX(r);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[r][c] = V::fma(xv, wv[c], acc[r][c]);
        }
    };
    constexpr int64_t kLine = 64 / sizeof(Element);  // elements per cache line
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        if (prefetch)
            for (int64_t e = 0; e < C * kLanes; e += kLine) __builtin_prefetch(prefetch + i * C + e, 0, 3);
        V wv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) wv[c] = V::load(w[c] + i);
        step(wv, [&](int r) { return V::load(x[r] + i); });
    }
    if (i < n) {
        V wv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) wv[c] = loadPadded<V>(w[c] + i, n - i);
        step(wv, [&](int r) { return loadPadded<V>(x[r] + i, n - i); });
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) out[r * C + c] = acc[r][c].sum();
}

// Rows are taken in blocks that stay in L2 while every output tile of [o0, o1) passes over them, so
// the weights are streamed rows/kRowBlock times. A tile past the last row or output repeats the last
// one (and discards it): each element's order stays the same whatever tile it lands in.
template <typename V, int R, int C, typename Element>
void linearTiles(const float* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    constexpr int64_t kRowBlock = 64;
    for (int64_t rb = 0; rb < rows; rb += kRowBlock) {
        const int64_t rowEnd = smaller(rows, rb + kRowBlock);
        for (int64_t o = o0; o < o1; o += C) {
            const Element* wp[C];
            for (int c = 0; c < C; ++c) wp[c] = w + smaller(o + c, o1 - 1) * in;
            // Rows are contiguous: the next tile's weights follow this one's. Only a single row
            // streams them from memory once (more rows reuse them from the cache).
            const Element* next = rows == 1 && o + 2 * C <= o1 ? w + (o + C) * in : nullptr;
            for (int64_t r = rb; r < rowEnd; r += R) {
                const float* xp[R];
                for (int k = 0; k < R; ++k) xp[k] = x + smaller(r + k, rowEnd - 1) * in;
                float tile[R * C];
                dotTile<V, R, C>(xp, wp, in, tile, next);
                for (int k = 0; k < R && r + k < rowEnd; ++k)
                    for (int c = 0; c < C && o + c < o1; ++c) y[(r + k) * yStride + o + c] = tile[k * C + c];
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
    if (!panel) return linearTiles<V, V::kRows, V::kCols>(x, rows, in, w, y, yStride, o0, o1);  // same bits
    for (int64_t o = o0; o < o1; o += P) {
        for (int c = 0; c < P; ++c) {
            const Element* row = o + c < o1 ? w + (o + c) * in : nullptr;
            for (int64_t j = 0; j < kLanes; ++j)
                for (int64_t t = 0; t < T; ++t) {
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
#pragma GCC unroll 8
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
#pragma GCC unroll 8
                        for (int k = 0; k < R; ++k) {
                            const W b = W::broadcast(xs[k][t * kLanes + j]);
                            acc[k][0] = W::fma(b, w0, acc[k][0]);
                            acc[k][1] = W::fma(b, w1, acc[k][1]);
                        }
                    }
#pragma GCC unroll 8
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
        linearTiles<V, V::kRows, V::kCols>(x, rows, in, w, y, yStride, o0, o1);
    else
        linearTiles<V, 1, V::kDecodeCols>(x, rows, in, w, y, yStride, o0, o1);  // a decode step's one row
}

// One (query row, head) pair: scores over keys 0..p, softmax (max, then exp and sum in key order),
// then the weighted sum of values accumulated per feature in key order and divided by the sum.
template <typename V, typename Element>
void attentionOne(const AttentionArgs<Element>& a, int64_t s, int64_t h, float* scores) {
    const int64_t D = a.D, n = a.start + s + 1, kvHead = h / (a.Q / a.KV);
    const float* q = a.q + (s * a.Q + h) * D;
    const Element* keys = a.keys + kvHead * a.headStride;
    const Element* values = a.values + kvHead * a.headStride;

    constexpr int kKeys = 4;  // keys per tile: four independent accumulators
    for (int64_t t = 0; t < n; t += kKeys) {
        const Element* kp[kKeys];
        for (int c = 0; c < kKeys; ++c) kp[c] = keys + smaller(t + c, n - 1) * D;
        float tile[kKeys];
        dotTile<V, 1, kKeys>(&q, kp, D, tile);
        for (int c = 0; c < kKeys && t + c < n; ++c) scores[t + c] = tile[c] * a.scale;
    }
    float highest = scores[0];
    for (int64_t t = 1; t < n; ++t) highest = scores[t] > highest ? scores[t] : highest;
    float total = 0;
    for (int64_t t = 0; t < n; ++t) {
        scores[t] = expf(scores[t] - highest);
        total += scores[t];
    }

    float* out = a.out + (s * a.Q + h) * D;
    for (int64_t d = 0; d < D; d += kLanes) {
        const int64_t width = smaller(kLanes, D - d);
        V acc = V::zero();
        for (int64_t t = 0; t < n; ++t) {
            const Element* v = values + t * D + d;
            acc = V::fma(V::broadcast(scores[t]), width == kLanes ? V::load(v) : loadPadded<V>(v, width), acc);
        }
        float lanes[kLanes];
        acc.store(lanes);
        for (int64_t j = 0; j < width; ++j) out[d + j] = lanes[j] / total;
    }
}

template <typename V, typename Element>
void attention(const AttentionArgs<Element>& a, int64_t begin, int64_t end, float* scores) {
    for (int64_t pair = begin; pair < end; ++pair) attentionOne<V>(a, pair / a.Q, pair % a.Q, scores);
}

template <typename V>
void triad(float* a, const float* b, const float* c, float s, int64_t n) {
    const V scale = V::broadcast(s);
    for (int64_t i = 0; i < n; i += kLanes) V::fma(scale, V::load(c + i), V::load(b + i)).store(a + i);
}

template <typename V>
float readAll(const float* x, int64_t n) {
    const V one = V::broadcast(1.0f);
    V acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    for (int64_t i = 0; i < n; i += 4 * kLanes)
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) acc[k] = V::fma(V::load(x + i + k * kLanes), one, acc[k]);
    return acc[0].sum() + acc[1].sum() + acc[2].sum() + acc[3].sum();
}

template <typename V>
float sumOfSquares(const float* x, int64_t n) {
    float out = 0;
    dotTile<V, 1, 1>(&x, &x, n, &out);
    return out;
}

}  // namespace
}  // namespace kvscope::kernels::impl

// The entry points of one instruction-set path, namespace `ns`, on vector type `V` (declared again
// in invariant_dispatch.cpp). Used once at the end of each invariant_*.cpp, in kvscope::kernels.
#define KVSCOPE_DEFINE_KERNEL_PATH(ns, V)                                                                           \
    namespace ns {                                                                                                  \
    void linear(const float* x, int64_t rows, int64_t in, const float* w, float* y, int64_t yStride, int64_t o0,    \
                int64_t o1) {                                                                                       \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1);                                                        \
    }                                                                                                               \
    void linear(const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0, \
                int64_t o1) {                                                                                       \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1);                                                        \
    }                                                                                                               \
    void attention(const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {                      \
        impl::attention<V>(a, begin, end, scores);                                                                  \
    }                                                                                                               \
    void attention(const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {                   \
        impl::attention<V>(a, begin, end, scores);                                                                  \
    }                                                                                                               \
    float sumOfSquares(const float* x, int64_t n) { return impl::sumOfSquares<V>(x, n); }                           \
    void triad(float* a, const float* b, const float* c, float s, int64_t n) { impl::triad<V>(a, b, c, s, n); }     \
    float readAll(const float* x, int64_t n) { return impl::readAll<V>(x, n); }                                     \
    int64_t panelFromRows() { return V::kPanelFromRows; }                                                           \
    }
