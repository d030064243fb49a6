// SPDX-License-Identifier: MIT
#pragma once
// Attention and the kernels' own exp, written once over the vector type V of invariant_impl.h (which
// lists what V provides, and why everything here has internal linkage and calls no inline function
// of the standard library). The order: invariant.h.
#include "core/kernels/invariant_impl.h"

#include <string.h>  // memcpy

namespace kvscope::kernels::impl {
namespace {

// Each instruction set's file compiles these templates in its own anonymous namespace (other
// target flags, other code) and instantiates the ones its kernels use: the rest are unused there.
// NOLINTBEGIN(clang-diagnostic-unused-template)

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

// The weighted sums of `count` < V::kValueRows queries (what a group leaves after its whole sets of
// kValueRows): their chains side by side as far as they go (three heads: 12 chains instead of three
// passes of 4), then any features past the last whole block one by one. Q = the largest count left.
template <typename V, int Q, typename Element>
void sumValuesOfRest(int64_t count, float* const* weights, const Element* values, int64_t D, int64_t n,
                     const float* totals, float* const* out) {
    if constexpr (Q > 0) {
        if (count < Q) return sumValuesOfRest<V, Q - 1>(count, weights, values, D, n, totals, out);
        const int64_t rest = sumValuesInBlocks<V, Q>(weights, values, D, n, totals, out);
        for (int k = 0; k < Q; ++k) sumValuesFrom<V>(rest, weights[k], values, D, n, totals[k], out[k]);
    }
}

// Keys a decode step's score loop fetches ahead of the tile it reads. The step finds its layer's
// keys in memory (the step's weight stream has evicted them since the last step), and the loop's
// pace, R x 4 dot products a tile, was too slow for the hardware prefetcher to run far enough ahead
// (docs/history/kernel-measurements.md, "Keys fetched ahead"). A prefill's queries read the same keys one group after another, from the caches.
constexpr int64_t kKeysAhead = 32;

// A tile of R queries x K keys' scores (row-major), times `scale`, into the queries' score rows at
// keys [t, t + K) (those before n): whole tiles scaled as vectors and copied a query's run at once
// (one lane at a time, the store and its bounds test were 30% of attentionGroup's own time).
template <typename V, int R, int K>
void storeScaledScores(float* tile, float scale, int64_t count, int64_t t, int64_t n, float* const* scores) {
    if constexpr (R * K % kLanes == 0) {
        if (t + K <= n) {
#pragma GCC unroll 4
            for (int i = 0; i < R * K; i += kLanes) V::mul(V::load(tile + i), V::broadcast(scale)).store(tile + i);
            for (int64_t r = 0; r < count; ++r) memcpy(scores[r] + t, tile + r * K, K * sizeof(float));
            return;
        }
    }
    for (int64_t r = 0; r < count; ++r)
        for (int c = 0; c < K && t + c < n; ++c) scores[r][t + c] = tile[r * K + c] * scale;
}

// QR queries' scores against 16 keys side by side: keysInLanes holds their D features as D vectors
// (feature d of key c at d * 16 + c). The order is dotTile's (invariant.h's 16-lane order): reduction
// lane j of a score is the chain of FMAs over features j, j + 16, ... from +0, and the lanes are
// summed by the tree l[j] + l[j + 8], then + 4, + 2, + 1. Here each such chain is one vector, the
// same chain for 16 keys, and each level of the tree one add of two vectors, done as soon as both
// are ready (lane p's and p + 8's chains, then p's and p + 4's sums), so a query keeps 4 partial sums
// in registers. Every key vector loaded is shared by the QR queries. Faster than dotTile's 4 x 4
// tiles, which reduce over features within a vector and then transpose 16 trees
// (docs/history/kernel-measurements.md, "Keys in lanes").
static_assert(kKeysSideBySide == kLanes, "AttentionArgs::keysInLanes holds one key per lane");
template <typename V, int QR>
void scoresOfKeysInLanes(const float* const* q, const float* keysInLanes, int64_t D, V* out) {
    auto chain = [&](int64_t lane, V* acc) {  // acc[r] = lane `lane`'s chain of query r
#pragma GCC unroll 4
        for (int r = 0; r < QR; ++r) acc[r] = V::zero();
#pragma GCC unroll 8
        for (int64_t d = lane; d < D; d += kLanes) {
            const V keys = V::load(keysInLanes + d * kLanes);
#pragma GCC unroll 4
            for (int r = 0; r < QR; ++r) acc[r] = V::fma(V::broadcast(q[r][d]), keys, acc[r]);
        }
    };
    V quarter[QR][4];  // quarter[r][p]: lanes p, p + 4, p + 8 and p + 12 of query r, summed by the tree
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
        V half[2][QR];  // lanes p + 8 i and p + 8 i + 8 summed (the tree's first level), i = 0, 1
#pragma GCC unroll 2
        for (int i = 0; i < 2; ++i) {
            V low[QR], high[QR];
            chain(p + 4 * i, low);
            chain(p + 4 * i + 8, high);
#pragma GCC unroll 4
            for (int r = 0; r < QR; ++r) half[i][r] = V::add(low[r], high[r]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < QR; ++r) quarter[r][p] = V::add(half[0][r], half[1][r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < QR; ++r)
        out[r] = V::add(V::add(quarter[r][0], quarter[r][2]), V::add(quarter[r][1], quarter[r][3]));
}

// The scores of QR queries against keys [0, n) laid out 16 side by side (AttentionArgs::keysInLanes,
// this KV head's blocks), times `scale`, into their score rows.
template <typename V, int QR>
void scoreQueriesKeysInLanes(const float* const* q, const float* keysInLanes, int64_t D, int64_t n, float scale,
                             float* const* scores) {
    for (int64_t t = 0; t < n; t += kLanes) {
        V out[QR];
        scoresOfKeysInLanes<V, QR>(q, keysInLanes + t * D, D, out);
#pragma GCC unroll 4
        for (int r = 0; r < QR; ++r) {
            const V scaled = V::mul(out[r], V::broadcast(scale));
            if (t + kLanes <= n) {
                scaled.store(scores[r] + t);
                continue;
            }
            float lanes[kLanes];
            scaled.store(lanes);
            memcpy(scores[r] + t, lanes, static_cast<size_t>(n - t) * sizeof(float));
        }
    }
}

// The same for `count` queries, QR at a time while that many are left, then the rest together (a
// group of 3 heads as one pass of 3 instead of three of 1). QR = the most together:
// V::kValueRows, as many as keep their partial sums in registers (as in the weighted sums).
template <typename V, int QR>
void scoreKeysInLanes(const float* const* q, int64_t count, const float* keysInLanes, int64_t D, int64_t n, float scale,
                      float* const* scores) {
    if constexpr (QR > 0) {
        if (count < QR) return scoreKeysInLanes<V, QR - 1>(q, count, keysInLanes, D, n, scale, scores);
        scoreQueriesKeysInLanes<V, QR>(q, keysInLanes, D, n, scale, scores);
        if (count > QR) scoreKeysInLanes<V, QR>(q + QR, count - QR, keysInLanes, D, n, scale, scores + QR);
    }
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

    if (a.keysInLanes) {  // a call of several queries: the keys laid out 16 side by side
        scoreKeysInLanes<V, V::kValueRows>(q, count, a.keysInLanes + kvHead * a.keysInLanesStride, D, n, a.scale,
                                           scores);
    } else {  // a decode step: R x 4 tiles over the keys where they lie
        constexpr int kKeys = 4;  // keys per tile: R x 4 independent accumulators
        const bool fetchAhead = a.S == 1;  // kKeysAhead; several queries without the layout share the keys
        for (int64_t t = 0; t < n; t += kKeys) {
            if (fetchAhead)  // key rows [t + kKeysAhead, that + kKeys), those before n: contiguous
                fetchIntoL1(keys + (t + kKeysAhead) * D, (smaller(t + kKeysAhead + kKeys, n) - t - kKeysAhead) * D);
            const Element* kp[kKeys];
            for (int c = 0; c < kKeys; ++c) kp[c] = keys + smaller(t + c, n - 1) * D;
            float tile[R * kKeys];
            dotTile<V, R, kKeys, LaneSteps<V>>(q, kp, D, tile);
            storeScaledScores<V, R, kKeys>(tile, a.scale, count, t, n, scores);
        }
    }
    for (int64_t r = 0; r < count; ++r) exps<V>(scores[r], largest<V>(scores[r], n), scores[r], n);
    // Each query's sum in key order, the R sums interleaved: one add's latency a key for all of them.
    float totals[R] = {};
    for (int64_t t = 0; t < n; ++t)
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) totals[r] += scores[r][t];

    // The whole blocks for V::kValueRows queries at once (as many chains as fit the registers),
    // then what is left; then any features past the last whole block.
    int64_t r = 0;
    for (; r + V::kValueRows <= count; r += V::kValueRows) {
        const int64_t rest = sumValuesInBlocks<V, V::kValueRows>(scores + r, values, D, n, totals + r, out + r);
        for (int k = 0; k < V::kValueRows; ++k)
            sumValuesFrom<V>(rest, scores[r + k], values, D, n, totals[r + k], out[r + k]);
    }
    sumValuesOfRest<V, V::kValueRows - 1>(count - r, scores + r, values, D, n, totals + r, out + r);
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

// NOLINTEND(clang-diagnostic-unused-template)
}  // namespace
}  // namespace kvscope::kernels::impl
