// SPDX-License-Identifier: MIT
#pragma once
// The batch-invariant kernels written once, over a 16-lane vector type V that each instruction-set
// file supplies (invariant_scalar.cpp, invariant_avx2.cpp, invariant_avx512*.cpp). V provides:
//   V::zero(), V::load(const float*), V::load(const uint16_t* bf16), V::broadcast(float),
//   V::fma(a, b, acc) = a*b + acc rounded once, v.sum() = the fixed lane tree, v.store(float*),
//   V::kSideBySideSums and V::sideBySideSums(v, out): the trees of that many vectors at once,
//   per lane: V::add, sub, mul, div, max and min (as MAXPS / MINPS: b where a comparison fails),
//   V::roundBf16(v) = v rounded to bf16 as c10::BFloat16 does, v.storeBf16(uint16_t*) its top halves,
//   V::pow2(n) = 2^n for integral n in [-126, 127], V::zeroBelow(x, limit, y) = x < limit ? 0 : y,
//   V::kRows x V::kCols: the tile of (rows x outputs) accumulators that fits its registers,
//   V::kDecodeCols: outputs per tile for a single row, in either order,
//   V::kDecodeFetchesAhead: whether such a tile fetches the next tile's weights ahead itself, and
//   V::kDecodeStreams: how many runs of such tiles a thread reads side by side,
//   V::kValueRows: how many queries' attention sums (4 chains each) fit its registers at once,
//   V::kPanelFromRows: from how many rows linear runs as panelLinear (0: never), V::kPanelForPairs:
//   whether the pair order does from 32 rows, with V::Wide (an output vector: kWidth, zero,
//   broadcast, load, fma, add, store), V::kPanelRows rows per tile, V::kPanelStepsAhead: how many
//   steps ahead of its own a panel's lane fetches (0: none), and V::kTransposes16: whether
//   V::transpose16(v) turns 16 vectors in place into their transpose (v[j] lane i = old v[i] lane j),
//   and v.storeFirst(p, n) stores lanes [0, n) alone, and V::loadPairs(p), V::oddOf(v) and
//   V::evenOf(v): the two loads below in two steps (the 16 pairs' bits, then either half widened),
//   V::loadOdd(p) and V::loadEven(p): lanes j = the bf16 elements 2j+1, 2j of p[0..32), widened,
//   V::Pairs: the pair order's step (invariant.h) on 32 bf16 elements, Chunk load(const uint16_t*)
//   and V dot(x, w, acc); EmulatedPairs<V> below (two FMAs, from V::loadOdd and V::loadEven) or
//   the dot-product instruction, with V::kNativePairs saying which.
// Attention and the kernels' exp are in invariant_attention_impl.h, over the tiles here; the paths
// instantiate both through invariant_path.h.
// Included only by those files, each compiled for its instruction set. Everything here has internal
// linkage (the anonymous namespace) and calls no inline function of the standard library: an inline
// function instantiated in the AVX-512 file is a weak symbol the linker may pick for the whole
// program, and would then run AVX-512 code on a CPU without it.
#include "core/kernels/invariant.h"

#include <stdlib.h>  // malloc, free
#include <string.h>  // memcpy, memset
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>  // _mm_getcsr, _mm_setcsr (always-inline builtins, no symbols)
#endif

namespace kvscope::kernels::impl {
namespace {

// Each instruction set's file compiles these templates in its own anonymous namespace (other
// target flags, other code) and instantiates the ones its kernels use: the rest are unused there.
// NOLINTBEGIN(clang-diagnostic-unused-template)

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

// out[i] = v[i].sum() for i in [0, N). Where V has a side-by-side form (kSideBySideSums > 1), the
// trees of that many vectors run together: each add of the tree is the same add of the same two
// lanes, with the vectors transposed between the tree's levels so that every add instruction works
// on full registers (a 4 x 4 attention tile's 16 trees: 15 adds and 31 shuffles instead of ~130
// instructions, most of them one lane wide).
template <typename V, int N>
void treeSums(const V* v, float* out) {
    constexpr int kTogether = V::kSideBySideSums;
    if constexpr (kTogether > 1 && N % kTogether == 0) {
#pragma GCC unroll 4
        for (int i = 0; i < N; i += kTogether) V::sideBySideSums(v + i, out + i);
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < N; ++i) out[i] = v[i].sum();
    }
}

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

// Where dotTile fetches the next tile's weights: into L1 when they fit in half of it beside the
// tile being read (32 KiB L1 on Zen 3 and 4, 48 on Sapphire Rapids), otherwise into L2 only: fetched
// into L1, a down projection's 4 rows of 4864 bf16 (38 KiB) evicted lines of the tile still to be
// read, and the shorter rows ran no faster into L2 (docs/history/kernel-measurements.md, "Tile
// fetch").
constexpr int64_t kPrefetchIntoL1Bytes = 16 << 10;

// out[r * C + c] = dot(x[r], w[c]) over n elements, R x C dot products sharing each load, in the
// order of Steps. With `prefetch`, the C * n elements from there are fetched towards the cache (into
// L1 or only into L2) along the way, at the pace the tile reads its own: a decode step's next weight
// rows, where a tile reads several side by side (each is too short a stream for the hardware
// prefetcher to ramp up, which halved the bandwidth from memory), or the weights a fixed distance
// ahead of a single row's (decodeFetchBytes).
template <typename V, int R, int C, typename Steps, typename XElement, typename WElement>
void dotTile(const XElement* const* x, const WElement* const* w, int64_t n, float* out,
             const WElement* prefetch = nullptr, bool prefetchIntoL1 = false) {
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
        if (prefetch && prefetchIntoL1)  // the locality is an immediate: prefetcht0
            for (int64_t e = 0; e < C * kStep; e += kLine) __builtin_prefetch(prefetch + i * C + e, 0, 3);
        else if (prefetch)  // prefetcht1
            for (int64_t e = 0; e < C * kStep; e += kLine) __builtin_prefetch(prefetch + i * C + e, 0, 2);
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
    treeSums<V, R * C>(&acc[0][0], out);
}

// Rows are taken in blocks that stay in L2 while every output tile of [o0, o1) passes over them, so
// the weights are streamed rows/kRowBlock times. A tile past the last row or output repeats the last
// one (and discards it): each element's order stays the same whatever tile it lands in, and so
// whatever order the tiles run in.
//
// A single row (a decode step) reads each weight once, from memory: there the outputs are taken as
// V::kDecodeStreams interleaved runs of tiles, so that each thread keeps that many sequential streams
// in flight, and with FetchAhead each tile fetches the next one's weights as it goes (the
// instruction-set files say what each path measured best with). Without FetchAhead, one stream of
// one row a tile fetches the weights decodeFetchBytes() ahead of its reads into L2, where this CPU
// takes that (invariant.h).
template <typename V, int R, int C, typename Steps, bool FetchAhead = true, typename XElement, typename Element>
void linearTiles(const XElement* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    constexpr int64_t kRowBlock = 64;
    const int64_t tiles = (o1 - o0 + C - 1) / C;
    const int64_t streams = rows == 1 ? smaller(V::kDecodeStreams, tiles) : 1;
    const int64_t tilesPerStream = (tiles + streams - 1) / streams;
    // A single stream of single rows reads [o0, o1)'s weights in address order: the distance is the
    // same in every tile, and fetching stops where the part ends.
    const int64_t ahead = !FetchAhead && rows == 1 && C == 1 && streams == 1
                              ? decodeFetchBytes() / static_cast<int64_t>(sizeof(Element))
                              : 0;
    // The next tile's rows go into L1 where they fit in half of it beside the tile being read; the
    // weights far ahead go into L2 only.
    const bool fetchIntoL1 = ahead == 0 && C * in * static_cast<int64_t>(sizeof(Element)) <= kPrefetchIntoL1Bytes;
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
            const Element* next = FetchAhead && rows == 1 && o + 2 * C <= streamEnd ? w + (o + C) * in : nullptr;
            if (ahead > 0 && (o + 1) * in + ahead <= o1 * in) next = wp[0] + ahead;
            for (int64_t r = rb; r < rowEnd; r += R) {
                const XElement* xp[R];
                for (int j = 0; j < R; ++j) xp[j] = x + smaller(r + j, rowEnd - 1) * in;
                float tile[R * C];
                dotTile<V, R, C, Steps>(xp, wp, in, tile, next, fetchIntoL1);
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

// Where lane j of step t of a reduction over `in` elements reads, for panelLinear, with the
// dotTile steps that compute the same order (what panelLinear falls back on):
//   LaneOrder: the 16-lane order, element 16 t + j;
//   PairLanes: the pair order as the 16-lane order over each chunk c of 32 elements rearranged,
//              step 2c its odd elements 32 c + 2 j + 1, step 2c + 1 its even ones (invariant.h).
// lanes(row, in, t): step t's 16 elements of a row, widened to fp32, zero past the row's end.
template <typename V>
struct LaneOrder {
    using Steps = LaneSteps<V>;
    static constexpr bool kPairs = false;
    static int64_t steps(int64_t in) { return (in + kLanes - 1) / kLanes; }
    template <typename Element>
    static V lanes(const Element* row, int64_t in, int64_t t) {
        const int64_t i = t * kLanes;
        return i + kLanes <= in ? V::load(row + i) : loadPadded<V>(row + i, in - i);
    }
};

template <typename V>
struct PairLanes {
    using Steps = PairSteps<V>;
    static constexpr bool kPairs = true;
    static int64_t steps(int64_t in) { return (in + 2 * kLanes - 1) / (2 * kLanes) * 2; }
    static V lanes(const uint16_t* row, int64_t in, int64_t t) {
        uint16_t padded[2 * kLanes];
        const uint16_t* p = chunk(row, in, t, padded);
        return t % 2 == 0 ? V::loadOdd(p) : V::loadEven(p);
    }
    // Steps t and t + 1 (t even) at once: the chunk's 16 pairs of elements (2j, 2j + 1) as 32-bit
    // lanes, unwidened (V::oddOf and V::evenOf widen lane j into step t's and step t + 1's lane j).
    static V pairs(const uint16_t* row, int64_t in, int64_t t) {
        uint16_t padded[2 * kLanes];
        return V::loadPairs(chunk(row, in, t, padded));
    }

private:
    // Step t's chunk of 32 elements: in place, or copied into `padded` with zeros past the row's end.
    static const uint16_t* chunk(const uint16_t* row, int64_t in, int64_t t, uint16_t* padded) {
        const int64_t i = t / 2 * 2 * kLanes;
        if (i + 2 * kLanes <= in) return row + i;
        memset(padded, 0, 2 * kLanes * sizeof(uint16_t));
        memcpy(padded, row + i, static_cast<size_t>(in - i) * sizeof(uint16_t));
        return padded;
    }
};

// 16 rows' lanes of steps t and t + 1 of the pair order (t even) in two stores a lane: one
// transpose of the rows' pairs gives lane j both steps' runs (lane c of each: row c's elements 2j + 1
// and 2j), half the shuffles and loads of a transpose a step. rowPairs(c): row c's PairLanes::pairs.
// store(j, odd, even): lane j's runs.
template <typename V, typename RowPairs, typename Store>
void transposePairs(const RowPairs& rowPairs, const Store& store) {
    V lanes[kLanes];
#pragma GCC unroll 16
    for (int c = 0; c < kLanes; ++c) lanes[c] = rowPairs(c);
    V::transpose16(lanes);  // moves bits only: the pairs are not yet numbers
#pragma GCC unroll 16
    for (int j = 0; j < kLanes; ++j) store(j, V::oddOf(lanes[j]), V::evenOf(lanes[j]));
}

// Rows [0, rows) in tiles of R, laid out [tile][lane j][step t][row k] (zeros past the last row),
// so that one lane's pass reads its steps' R broadcasts as one contiguous run. Where V transposes
// 16 vectors in registers, a step's R rows become the 16 lanes' runs at once. This 16-lane branch and
// packPanel's repeat transposePairs' body on purpose: shared through one always-inlined helper, the
// packing was slower (docs/history/kernel-measurements.md, "Row packing").
template <typename V, int R, typename Order, typename Element>
void packRows(const Element* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out) {
    const int64_t T = Order::steps(in);
    const int64_t end = smaller(rows, tile1 * R);
    out += tile0 * kLanes * T * R;
    for (int64_t r = tile0 * R; r < end; r += R, out += kLanes * T * R) {
        if constexpr (V::kTransposes16 && R <= kLanes && Order::kPairs) {
            for (int64_t t = 0; t < T; t += 2) {
                auto rowPairs = [&](int k) {
                    return k < R && r + k < rows ? Order::pairs(x + (r + k) * in, in, t) : V::zero();
                };
                transposePairs<V>(rowPairs, [&](int j, const V& odd, const V& even) {
                    odd.storeFirst(out + (j * T + t) * R, R);
                    even.storeFirst(out + (j * T + t + 1) * R, R);
                });
            }
        } else {
            for (int64_t t = 0; t < T; ++t) {
                auto rowLanes = [&](int k) { return r + k < rows ? Order::lanes(x + (r + k) * in, in, t) : V::zero(); };
                if constexpr (V::kTransposes16 && R <= kLanes) {
                    V lanes[kLanes];
#pragma GCC unroll 16
                    for (int k = 0; k < kLanes; ++k) lanes[k] = k < R ? rowLanes(k) : V::zero();
                    V::transpose16(lanes);
#pragma GCC unroll 16
                    for (int j = 0; j < kLanes; ++j) lanes[j].storeFirst(out + (j * T + t) * R, R);
                } else {
                    for (int k = 0; k < R; ++k) {
                        float lanes[kLanes];
                        rowLanes(k).store(lanes);
                        for (int j = 0; j < kLanes; ++j) out[(j * T + t) * R + k] = lanes[j];
                    }
                }
            }
        }
    }
}

// Weight rows [o, o + P) laid out [lane j][step t][output c] (zeros from o1 on), so that one lane
// streams contiguously. Where V can transpose 16 vectors in registers (kTransposes16), 16 rows'
// lanes of a step are loaded as vectors and become 16 lanes' runs of outputs, stored whole, and
// those 16 rows are read to their end before the next 16: 16 sequential streams from memory at a
// time instead of all P rows' (a little shorter prefills: docs/history/kernel-measurements.md,
// "Panel packing"). Otherwise, step by step, each row's
// vector is spread over the lanes' runs element by element (their lines stay in L1 while the P rows
// of a step fill them).
template <typename V, int P, typename Order, typename Element>
void packPanel(const Element* w, int64_t in, int64_t o, int64_t o1, float* panel) {
    const int64_t T = Order::steps(in);
    auto rowLanes = [&](int c, int64_t t) { return o + c < o1 ? Order::lanes(w + (o + c) * in, in, t) : V::zero(); };
    if constexpr (V::kTransposes16 && P % kLanes == 0 && Order::kPairs) {
        for (int h = 0; h < P; h += kLanes)
            for (int64_t t = 0; t < T; t += 2) {
                auto rowPairs = [&](int c) {
                    return o + h + c < o1 ? Order::pairs(w + (o + h + c) * in, in, t) : V::zero();
                };
                transposePairs<V>(rowPairs, [&](int j, const V& odd, const V& even) {
                    odd.store(panel + (j * T + t) * P + h);
                    even.store(panel + (j * T + t + 1) * P + h);
                });
            }
    } else if constexpr (V::kTransposes16 && P % kLanes == 0) {
        for (int h = 0; h < P; h += kLanes)
            for (int64_t t = 0; t < T; ++t) {
                V lanes[kLanes];
#pragma GCC unroll 16
                for (int c = 0; c < kLanes; ++c) lanes[c] = rowLanes(h + c, t);
                V::transpose16(lanes);
#pragma GCC unroll 16
                for (int j = 0; j < kLanes; ++j) lanes[j].store(panel + (j * T + t) * P + h);
            }
    } else {
        for (int64_t t = 0; t < T; ++t)
            for (int c = 0; c < P; ++c) {
                float lanes[kLanes];
                rowLanes(c, t).store(lanes);
                for (int64_t j = 0; j < kLanes; ++j) panel[(j * T + t) * P + c] = lanes[j];
            }
    }
}

// The same order for many rows, computed as an outer product. Lane j of output (r, o) is a chain
// of FMAs over its lane's elements (Order) from 0; here the chains of one lane advance together for
// a tile of R rows x 2W outputs (W: an output vector type, W::kWidth outputs side by side), one
// weight load per W outputs and one broadcast per row feeding 2R FMAs, where dotTile needs one
// 16-lane accumulator per output and loads of both operands for every FMA pair. Each chain sees the
// same FMAs in the same order, and the 16 lanes are then summed by the same tree, so the bits are
// dotTile's (the kernel tests hold this path to the scalar reference). Padding adds 0 * 0 to a chain,
// which leaves it as it was (a chain that starts at +0 is never -0).
//   xs:     the rows, packRows' layout, widened once per call
//   panels: G panels of 2W weight rows each (packPanel's layout, widened once per call), as many as
//           share the L2 cache with the rows they pass over (cacheBytesForPanels)
//   part:   [lane j][row][output], the chains' ends, summed by the tree
// A lane passes over all its steps at once, its R x 2 chains in registers from the first step to the
// last, reading two contiguous runs (its panel lane and its rows' lane): faster than rows laid out
// step by step and the reduction cut into chunks of 32 steps (docs/history/kernel-measurements.md,
// "Panel lanes").
template <typename V>
struct PanelShape {
    using W = typename V::Wide;
    static constexpr int R = V::kPanelRows, C = 2, P = C * W::kWidth;  // two output vectors a row
};

// Fetches the cache lines of elements [p, p + n) into L1 (a fetch past an array's end, as a panel's
// last steps' are, touches nothing: prefetches do not fault).
template <typename Element>
void fetchIntoL1(const Element* p, int64_t n) {
    constexpr int64_t kLine = 64 / sizeof(Element);  // elements per cache line
    for (int64_t i = 0; i < n; i += kLine) __builtin_prefetch(p + i, 0, 3);
}

// Rows [r, r + R) (those before `rows`) against one panel: outputs [o, o + P) (those before o1).
// xt: the tile's packed rows.
template <typename V>
void panelTile(const float* xt, int64_t r, int64_t rows, int64_t T, const float* panel, float* y, int64_t yStride,
               int64_t o, int64_t o1) {
    using S = PanelShape<V>;
    using W = typename S::W;
    constexpr int R = S::R, C = S::C, P = S::P;
    alignas(64) float part[kLanes][R][P];  // whole cache lines for the lanes' vector stores
    for (int64_t j = 0; j < kLanes; ++j) {
        W acc[R][C];
#pragma GCC unroll 16
        for (int k = 0; k < R; ++k)
#pragma GCC unroll 4
            for (int h = 0; h < C; ++h) acc[k][h] = W::zero();
        const float* wp = panel + j * T * P;
        const float* xp = xt + j * T * R;
        for (int64_t t = 0; t < T; ++t, wp += P, xp += R) {
            if constexpr (V::kPanelStepsAhead > 0) fetchIntoL1(wp + V::kPanelStepsAhead * P, P);
            W wv[C];
#pragma GCC unroll 4
            for (int h = 0; h < C; ++h) wv[h] = W::load(wp + h * W::kWidth);
#pragma GCC unroll 16
            for (int k = 0; k < R; ++k) {
                const W b = W::broadcast(xp[k]);
#pragma GCC unroll 4
                for (int h = 0; h < C; ++h) acc[k][h] = W::fma(b, wv[h], acc[k][h]);
            }
        }
#pragma GCC unroll 16
        for (int k = 0; k < R; ++k)
#pragma GCC unroll 4
            for (int h = 0; h < C; ++h) acc[k][h].store(&part[j][k][h * W::kWidth]);
    }
    // The tree's loops unrolled, its sums in registers (left to the compiler, they went through the
    // stack: docs/history/kernel-measurements.md, "Panel tree").
    for (int k = 0; k < R && r + k < rows; ++k)
#pragma GCC unroll 4
        for (int h = 0; h < C; ++h) {  // the tree: +8, +4, +2, +1, one output vector at a time
            W s[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j)
                s[j] = W::add(W::load(&part[j][k][h * W::kWidth]), W::load(&part[j + 8][k][h * W::kWidth]));
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) s[j] = W::add(s[j], s[j + 4]);
#pragma GCC unroll 2
            for (int j = 0; j < 2; ++j) s[j] = W::add(s[j], s[j + 2]);
            const W total = W::add(s[0], s[1]);
            float* out = y + (r + k) * yStride + o + h * W::kWidth;
            if (o + (h + 1) * W::kWidth <= o1) {
                total.store(out);
                continue;
            }
            float sums[W::kWidth];
            total.store(sums);
            for (int c = 0; o + h * W::kWidth + c < o1; ++c) out[c] = sums[c];
        }
}

// 64-byte aligned storage for n floats (panels' vector loads then never straddle two cache lines),
// or null.
inline float* alignedFloats(int64_t n) {
    return static_cast<float*>(aligned_alloc(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64));
}

// packed: the rows already packed (packRows' layout, PackedRows below), or null to pack them here.
template <typename V, typename Order, typename XElement, typename Element>
void panelLinear(const XElement* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1, const float* packed) {
    using S = PanelShape<V>;
    constexpr int R = S::R, P = S::P;
    const int64_t T = Order::steps(in), tiles = (rows + R - 1) / R, panelFloats = kLanes * T * P;
    const int64_t tileFloats = kLanes * T * R;
    // As many panels as share the L2 cache with the rows they pass over: each tile's rows are then
    // read once for G panels (from L3 for wide inputs: 512 x 4864 rows are 10 MB packed).
    const int64_t fit = cacheBytesForPanels() / (panelFloats * static_cast<int64_t>(sizeof(float)));
    const int64_t G = smaller(fit > 1 ? fit : 1, (o1 - o0 + P - 1) / P);
    float* panels = alignedFloats(G * panelFloats);
    float* ownRows = packed ? nullptr : alignedFloats(tiles * tileFloats);
    if (!panels || (!packed && !ownRows)) {  // out of memory: the same bits, slower
        free(panels);
        free(ownRows);
        return linearTiles<V, V::kRows, V::kCols, typename Order::Steps>(x, rows, in, w, y, yStride, o0, o1);
    }
    if (!packed) packRows<V, R, Order>(x, rows, in, 0, tiles, ownRows);
    const float* xs = packed ? packed : ownRows;
    for (int64_t o = o0; o < o1; o += G * P) {
        const int64_t count = smaller(G, (o1 - o + P - 1) / P);
        for (int64_t g = 0; g < count; ++g) packPanel<V, P, Order>(w, in, o + g * P, o1, panels + g * panelFloats);
        for (int64_t tile = 0; tile < tiles; ++tile)
            for (int64_t g = 0; g < count; ++g)
                panelTile<V>(xs + tile * tileFloats, tile * R, rows, T, panels + g * panelFloats, y, yStride, o + g * P,
                             o1);
    }
    free(panels);
    free(ownRows);
}

// Where linear / linearPairs compute `rows` rows as panels, their rows packed once for every
// thread of a call (the caller's, invariant_ops.cpp) instead of by each thread for its outputs:
// each thread packed all of them, 10 MB of fp32 for 512 rows of 4864 inputs, 20 MB for two threads.
// floats(): how many floats the packed rows take, 0 where the rows take no panels here; tiles():
// how many tiles of rows pack() packs, [tile0, tile1) of them a call.
template <typename V, typename Order>
struct PackedRows {
    static constexpr int R = PanelShape<V>::R;
    static bool used(int64_t rows) {
        if constexpr (Order::kPairs)
            return !V::kNativePairs && V::kPanelForPairs && rows >= kPairPanelFromRows;
        else
            return V::kPanelFromRows > 0 && rows >= V::kPanelFromRows;
    }
    static int64_t tiles(int64_t rows) { return (rows + R - 1) / R; }
    static int64_t floats(int64_t rows, int64_t in) {
        return used(rows) ? tiles(rows) * kLanes * Order::steps(in) * R : 0;
    }
    template <typename Element>
    static void pack(const Element* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out) {
        packRows<V, R, Order>(x, rows, in, tile0, tile1, out);  // moves bits only: no MXCSR to set
    }
};

// The path's side of PackedRows: zero floats where it has no panels.
template <typename V>
constexpr bool kHasPanels = V::kPanelFromRows > 0 || V::kPanelForPairs;

template <typename V>
int64_t packedRowsFloats(int64_t rows, int64_t in, bool pairs) {
    if constexpr (kHasPanels<V>)
        return pairs ? PackedRows<V, PairLanes<V>>::floats(rows, in) : PackedRows<V, LaneOrder<V>>::floats(rows, in);
    else
        return 0;
}

template <typename V>
int64_t packedRowTiles(int64_t rows) {
    if constexpr (kHasPanels<V>)
        return PackedRows<V, LaneOrder<V>>::tiles(rows);
    else
        return 0;
}

// bf16 rows in the pair order's lanes, fp32 rows in the 16-lane order's.
template <typename V, typename Element>
void packRowTiles(const Element* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out) {
    if constexpr (kHasPanels<V>) {
        if constexpr (sizeof(Element) == sizeof(uint16_t))
            PackedRows<V, PairLanes<V>>::pack(x, rows, in, tile0, tile1, out);
        else
            PackedRows<V, LaneOrder<V>>::pack(x, rows, in, tile0, tile1, out);
    }
}

template <typename V, typename Element>
void linear(const float* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1, const float* packed) {
    if constexpr (V::kPanelFromRows > 0) {
        if (PackedRows<V, LaneOrder<V>>::used(rows))
            return panelLinear<V, LaneOrder<V>>(x, rows, in, w, y, yStride, o0, o1, packed);
    }
    if (rows >= V::kRows)
        linearTiles<V, V::kRows, V::kCols, LaneSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
    else  // a decode step's one row
        linearTiles<V, 1, V::kDecodeCols, LaneSteps<V>, V::kDecodeFetchesAhead>(x, rows, in, w, y, yStride, o0, o1);
}

// The pair order. With the instruction, or for a few rows, as dotTiles over 32-element steps; many
// rows without it, as panelLinear's outer product over the order's lanes (PairLanes), whose
// packing, a few cycles per weight and input, the FMAs on widened copies earn back.
template <typename V>
void linearPairs(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1, const float* packed) {
    const FlushDenormals flushed;
    if constexpr (!V::kNativePairs && V::kPanelForPairs) {
        if (PackedRows<V, PairLanes<V>>::used(rows))
            return panelLinear<V, PairLanes<V>>(x, rows, in, w, y, yStride, o0, o1, packed);
    }
    if (rows >= V::kRows) return linearTiles<V, V::kRows, V::kCols, PairSteps<V>>(x, rows, in, w, y, yStride, o0, o1);
    linearTiles<V, 1, V::kDecodeCols, PairSteps<V>, V::kDecodeFetchesAhead>(x, rows, in, w, y, yStride, o0, o1);
}

template <typename V>
float sumOfSquares(const float* x, int64_t n) {
    float out = 0;
    dotTile<V, 1, 1, LaneSteps<V>>(&x, &x, n, &out);
    return out;
}

// NOLINTEND(clang-diagnostic-unused-template)
}  // namespace
}  // namespace kvscope::kernels::impl
