// SPDX-License-Identifier: MIT
#pragma once
// The 16-lane vector on AVX-512F, shared by two paths: invariant_avx512.cpp (compiled with
// -mavx512f) emulates the pair order with two FMAs; invariant_avx512bf16.cpp (also -mavx512bf16)
// computes it with VDPBF16PS. Internal linkage, like everything the paths include
// (invariant_impl.h says why).
#include "core/kernels/invariant_path.h"

#include <immintrin.h>

namespace kvscope::kernels {
namespace {

struct Avx512Vec;

#ifdef __AVX512BF16__
// The pair order in one instruction: 16 lanes, each adding two bf16 products (odd, then even).
struct NativePairs {
    using Chunk = __m512bh;
    static Chunk load(const uint16_t* p) { return reinterpret_cast<Chunk>(_mm512_loadu_si512(p)); }
    static Avx512Vec dot(const Chunk& x, const Chunk& w, const Avx512Vec& acc);
};
#endif

// The vector type of every AVX-512 file (its own anonymous namespace there, compiled for its
// target); each uses the members its kernels need (invariant_amx.cpp the transpose alone).
// NOLINTBEGIN(clang-diagnostic-unused-member-function)
struct Avx512Vec {
    // 32 registers: a 4 x 4 tile holds 16 accumulators + 4 x rows + the weight rows being loaded.
    // A decode row takes one weight row at a time, in either order, with no tile fetching the next
    // one's rows: a thread then reads its weights in address order, one stream, and out-of-order
    // execution overlaps the next rows' chains (a row's sum is one chain of dependent steps). On
    // Intel CPUs that stream is also fetched into L2 a fixed distance ahead
    // (kernels::decodeFetchBytes); on AMD ones the hardware prefetcher runs ahead of it alone.
    // Measured: docs/history/kernel-measurements.md, "AVX-512 decode rows".
    static constexpr int kRows = 4, kCols = 4, kDecodeCols = 1, kDecodeStreams = 1;
    static constexpr bool kDecodeFetchesAhead = false;
    static constexpr int kValueRows = 4;  // 16 attention chains + 4 value vectors + a broadcast
    // Many rows take panelLinear: 12 rows x 32 outputs of one lane in 24 registers, 2 weight vectors
    // and a broadcast, 14 loads per 24 FMAs. It beats the 4 x 4 tile in the pair order without
    // VDPBF16PS; in the 16-lane order the tile is as fast on weights in the cache but re-reads them
    // for every 64 rows, from memory in a prefill, where the panel streams them once a call. Up to
    // 64 rows the tile reads them once too. Other panel shapes measured the same. Measured:
    // docs/history/kernel-measurements.md, "AVX-512 panels".
    using Wide = Avx512Vec;  // 16 outputs side by side
    static constexpr int kWidth = 16;
    static constexpr int kPanelRows = 12, kPanelFromRows = 64;
    // A lane's run of the panel comes from L2 (the call's panels are kept there, not in L1), two
    // lines a step, fetched into L1 8 steps (1 KB) ahead: a few percent off a prefill; 4, 16 and 32
    // steps did as well, fetching the rows' lane too added nothing. Measured:
    // docs/history/kernel-measurements.md, "AVX-512 panel fetch".
    static constexpr int kPanelStepsAhead = 8;
    static constexpr bool kPanelForPairs = true;
    static constexpr bool kTransposes16 = true;
#ifdef __AVX512BF16__
    using Pairs = NativePairs;
    static constexpr bool kNativePairs = true;
#else
    using Pairs = impl::EmulatedPairs<Avx512Vec>;
    static constexpr bool kNativePairs = false;
#endif
    __m512 v;

    static Avx512Vec zero() { return {_mm512_setzero_ps()}; }
    static Avx512Vec broadcast(float value) { return {_mm512_set1_ps(value)}; }
    static Avx512Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
    static Avx512Vec load(const uint16_t* bf16) {
        const __m512i halves = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16)));
        return {_mm512_castsi512_ps(_mm512_slli_epi32(halves, 16))};
    }
    // 32 bf16 elements as 16 pairs of 32 bits (element 2j low, 2j+1 high): the high halves are
    // fp32 already, the low halves shifted up are.
    static Avx512Vec loadOdd(const uint16_t* bf16) {
        return {_mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(bf16), _mm512_set1_epi32(-65536)))};
    }
    static Avx512Vec loadEven(const uint16_t* bf16) {
        return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(bf16), 16))};
    }
    // The same in two steps: the 16 pairs' bits as they are, then either half of each widened.
    static Avx512Vec loadPairs(const uint16_t* bf16) { return {_mm512_castsi512_ps(_mm512_loadu_si512(bf16))}; }
    static Avx512Vec oddOf(const Avx512Vec& pairs) {
        return {_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(pairs.v), _mm512_set1_epi32(-65536)))};
    }
    static Avx512Vec evenOf(const Avx512Vec& pairs) {
        return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(pairs.v), 16))};
    }
    static Avx512Vec fma(const Avx512Vec& a, const Avx512Vec& b, const Avx512Vec& acc) {
        return {_mm512_fmadd_ps(a.v, b.v, acc.v)};
    }
    static Avx512Vec add(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_add_ps(a.v, b.v)}; }
    static Avx512Vec sub(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_sub_ps(a.v, b.v)}; }
    static Avx512Vec mul(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_mul_ps(a.v, b.v)}; }
    static Avx512Vec max(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_max_ps(a.v, b.v)}; }
    static Avx512Vec min(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_min_ps(a.v, b.v)}; }
    static Avx512Vec pow2(const Avx512Vec& n) {
        const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
        return {_mm512_castsi512_ps(_mm512_slli_epi32(biased, 23))};
    }
    static Avx512Vec div(const Avx512Vec& a, const Avx512Vec& b) { return {_mm512_div_ps(a.v, b.v)}; }
    static Avx512Vec roundBf16(const Avx512Vec& x) {  // bits + 0x7FFF + (bit 16), low half cleared
        const __m512i bits = _mm512_castps_si512(x.v);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
        const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF));
        const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(bits, bias), _mm512_set1_epi32(-65536));
        const __mmask16 nan = _mm512_cmp_ps_mask(x.v, x.v, _CMP_UNORD_Q);
        return {_mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7FC00000)))};
    }
    void storeBf16(uint16_t* p) const {
        const __m512i high = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(high));
    }
    static Avx512Vec zeroBelow(const Avx512Vec& x, float limit, const Avx512Vec& y) {
        return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x.v, _mm512_set1_ps(limit), _CMP_NLT_UQ), y.v)};
    }
    float sum() const {
        const __m256 low = _mm512_castps512_ps256(v);
        const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        const __m256 s8 = _mm256_add_ps(low, high);  // l[j] + l[j+8]
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // + 4
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // + 2
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));  // + 1
    }
    // out[i] = v[i].sum() for 16 vectors: sum()'s adds, each level on whole registers. 128-bit
    // blocks are named b0..b3.
    static constexpr int kSideBySideSums = 16;
    static void sideBySideSums(const Avx512Vec* v, float* out) {
        __m512 s8[8], s4[4], s2[2];
#pragma GCC unroll 8
        for (int p = 0; p < 8; ++p) {  // lanes j, j+8 of v[2p] -> s8[p].b0-b1, of v[2p+1] -> b2-b3
            const __m512 a = v[2 * p].v, b = v[2 * p + 1].v;
            s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)  // + 4: block k of s4[q] holds v[4q + k]'s four
            s4[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
        for (int r = 0; r < 2; ++r)  // + 2: block k of s2[r] holds v[8r + k]'s two, then v[8r + 4 + k]'s
            s2[r] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * r], s4[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(s4[2 * r], s4[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        // + 1: lane 4k + m holds v[4m + k]'s total; the permutation puts v[i]'s in lane i.
        const __m512 totals = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                            _mm512_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
        const __m512i lane = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(lane, totals));
    }
    void store(float* p) const { _mm512_storeu_ps(p, v); }
    void storeFirst(float* p, int n) const { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
    // v[j] lane i <- v[i] lane j, in 64 shuffles (panelLinear's weight packing). 128-bit blocks are
    // named b0..b3; after the two unpack levels, block b of u[4m + q] holds lane 4b + q of v[4m..4m+3].
    static void transpose16(Avx512Vec* v) {
        __m512 t[16], u[16];
#pragma GCC unroll 8
        for (int k = 0; k < 16; k += 2) {
            t[k] = _mm512_unpacklo_ps(v[k].v, v[k + 1].v);
            t[k + 1] = _mm512_unpackhi_ps(v[k].v, v[k + 1].v);
        }
        auto low = [](__m512 a, __m512 b) {
            return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
        };
        auto high = [](__m512 a, __m512 b) {
            return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
        };
#pragma GCC unroll 4
        for (int m = 0; m < 16; m += 4) {
            u[m] = low(t[m], t[m + 2]);
            u[m + 1] = high(t[m], t[m + 2]);
            u[m + 2] = low(t[m + 1], t[m + 3]);
            u[m + 3] = high(t[m + 1], t[m + 3]);
        }
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {  // block m of v[4b + q] <- block b of u[4m + q]
            const __m512 a0 = _mm512_shuffle_f32x4(u[q], u[4 + q], _MM_SHUFFLE(1, 0, 1, 0)),
                         a1 = _mm512_shuffle_f32x4(u[q], u[4 + q], _MM_SHUFFLE(3, 2, 3, 2)),
                         a2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], _MM_SHUFFLE(1, 0, 1, 0)),
                         a3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], _MM_SHUFFLE(3, 2, 3, 2));
            v[q].v = _mm512_shuffle_f32x4(a0, a2, _MM_SHUFFLE(2, 0, 2, 0));
            v[4 + q].v = _mm512_shuffle_f32x4(a0, a2, _MM_SHUFFLE(3, 1, 3, 1));
            v[8 + q].v = _mm512_shuffle_f32x4(a1, a3, _MM_SHUFFLE(2, 0, 2, 0));
            v[12 + q].v = _mm512_shuffle_f32x4(a1, a3, _MM_SHUFFLE(3, 1, 3, 1));
        }
    }
};

#ifdef __AVX512BF16__
Avx512Vec NativePairs::dot(const Chunk& x, const Chunk& w, const Avx512Vec& acc) {
    return {_mm512_dpbf16_ps(acc.v, x, w)};
}
#endif

// NOLINTEND(clang-diagnostic-unused-member-function)
}  // namespace
}  // namespace kvscope::kernels
