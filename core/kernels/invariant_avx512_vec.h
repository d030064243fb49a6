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

struct Avx512Vec {
    // 32 registers: a 4 x 4 tile holds 16 accumulators + 4 x rows + the weight rows being loaded. A
    // decode row takes 4 fp32 weight rows at a time (2 and 8 measured the same: memory bound), and
    // one bf16 row. Measured on a 2-core Sapphire Rapids VM, the linears of a bf16 decode step alone
    // (24 layers + lm_head, 988 MB from memory, the kernels' pool with two streams a thread): 33.4-
    // 33.9 ms with one row a tile against 37.8-38.4 with two and 40.5 with four; the layers' short
    // rows gained most (gate+up 26 -> 30 GB/s, down_proj 22 -> 26). Two rows a tile read the weights
    // as twice as many concurrent streams, more than the prefetchers keep up with. (An AMD Zen 4,
    // before the pool and with one stream a thread, had streamed the lm_head faster with two.)
    static constexpr int kRows = 4, kCols = 4, kDecodeCols = 4, kDecodePairCols = 1;
    static constexpr int kValueRows = 4;  // 16 attention chains + 4 value vectors + a broadcast
    // The 16-lane order keeps the 4 x 4 tile for many rows: panelLinear, which must pack fp32 weights
    // from memory first, measured 212-228 GFLOP/s against the tile's 236-289 (Sapphire Rapids, 2
    // threads, 512 rows). The pair order without VDPBF16PS, whose weights linearPairs lays out in L2
    // anyway, takes panelLinear: 12 rows x 32 outputs of one lane in 24 registers, 2 weight vectors
    // and a broadcast, 14 loads per 24 FMAs (193-215 GFLOP/s there, against the tile's 147-185).
    using Wide = Avx512Vec;  // 16 outputs side by side
    static constexpr int kWidth = 16;
    static constexpr int kPanelRows = 12, kPanelFromRows = 0;
    static constexpr bool kPanelForPairs = true;
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
    static Avx512Vec zeroBelow(const Avx512Vec& x, float limit, const Avx512Vec& y) {
        return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x.v, _mm512_set1_ps(limit), _CMP_NLT_UQ), y.v)};
    }
    float sum() const {
        const __m256 low = _mm512_castps512_ps256(v);
        const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
        const __m256 s8 = _mm256_add_ps(low, high);                                             // l[j] + l[j+8]
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // + 4
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // + 2
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                      // + 1
    }
    void store(float* p) const { _mm512_storeu_ps(p, v); }
};

#ifdef __AVX512BF16__
Avx512Vec NativePairs::dot(const Chunk& x, const Chunk& w, const Avx512Vec& acc) {
    return {_mm512_dpbf16_ps(acc.v, x, w)};
}
#endif

}  // namespace
}  // namespace kvscope::kernels
