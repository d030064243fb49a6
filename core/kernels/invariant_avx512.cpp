// SPDX-License-Identifier: MIT
// The fixed order on AVX-512F: one 16-lane register; the tree folds the upper 256 bits onto the
// lower, then 128, 64, 32. Compiled with -mavx512f; called only when the CPU has it.
#include "core/kernels/invariant_impl.h"

#include <immintrin.h>

namespace kvscope::kernels {
namespace {

struct Avx512Vec {
    // 32 registers: a 4 x 4 tile holds 16 accumulators + 4 x rows + the weight rows being loaded. A
    // decode row takes 4 weight rows at a time (2 and 8 measured the same: memory bound).
    static constexpr int kRows = 4, kCols = 4, kDecodeCols = 4;
    // No panel path: it could not be run on an AVX-512 CPU yet (the AVX2 one is measured and tested).
    static constexpr int kPanelFromRows = 0;
    __m512 v;

    static Avx512Vec zero() { return {_mm512_setzero_ps()}; }
    static Avx512Vec broadcast(float value) { return {_mm512_set1_ps(value)}; }
    static Avx512Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
    static Avx512Vec load(const uint16_t* bf16) {
        const __m512i halves = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16)));
        return {_mm512_castsi512_ps(_mm512_slli_epi32(halves, 16))};
    }
    static Avx512Vec fma(const Avx512Vec& a, const Avx512Vec& b, const Avx512Vec& acc) {
        return {_mm512_fmadd_ps(a.v, b.v, acc.v)};
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

}  // namespace

KVSCOPE_DEFINE_KERNEL_PATH(avx512, Avx512Vec)

}  // namespace kvscope::kernels
