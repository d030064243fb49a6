// SPDX-License-Identifier: MIT
// The fixed order on AVX2 + FMA: 16 lanes as two 8-float registers (lanes 0-7 and 8-15), so the
// tree's first step is one add of the two. Compiled with -mavx2 -mfma; called only when the CPU
// has both (invariant_dispatch.cpp).
#include "core/kernels/invariant_path.h"

#include <immintrin.h>

namespace kvscope::kernels {
namespace {

// Eight outputs side by side, for panelLinear.
struct Avx2Wide {
    static constexpr int kWidth = 8;
    __m256 v;

    static Avx2Wide zero() { return {_mm256_setzero_ps()}; }
    static Avx2Wide broadcast(float value) { return {_mm256_set1_ps(value)}; }
    static Avx2Wide load(const float* p) { return {_mm256_loadu_ps(p)}; }
    static Avx2Wide fma(const Avx2Wide& a, const Avx2Wide& b, const Avx2Wide& acc) {
        return {_mm256_fmadd_ps(a.v, b.v, acc.v)};
    }
    static Avx2Wide add(const Avx2Wide& a, const Avx2Wide& b) { return {_mm256_add_ps(a.v, b.v)}; }
    void store(float* p) const { _mm256_storeu_ps(p, v); }
};

struct Avx2Vec {
    // 16 registers: a 2 x 3 tile holds 12 accumulator halves (a 3 x 2 one measured slower); a
    // decode row against 4 weight rows, 8 + 2 x + 2 w halves, in either order, as one run of tiles
    // a thread, since the weights lie on 2 MiB pages (invariant_avx512_vec.h says why). The CPUs
    // measured disagreed on this against one row a tile in two runs, and none was AVX2-only:
    // docs/history/kernel-measurements.md, "AVX2 decode rows".
    static constexpr int kRows = 2, kCols = 3, kDecodeCols = 4, kDecodeStreams = 1;
    static constexpr bool kDecodeFetchesAhead = true;
    static constexpr int kValueRows = 1;  // two queries' 4 chains would fill all 16 registers
    // Many rows: 6 rows x 16 outputs of one lane in 12 registers, plus 2 weight vectors and a
    // broadcast (panelLinear). From 24 rows the packed panel pays for itself.
    using Wide = Avx2Wide;
    static constexpr int kPanelRows = 6, kPanelFromRows = 24;
    // Fetching a panel 8 steps ahead (kPanelStepsAhead) changed nothing measurable for this path
    // (the same section); not measured on an AVX2-only CPU.
    static constexpr int kPanelStepsAhead = 0;
    static constexpr bool kPanelForPairs = true;  // the pair order from 32 rows (PairLanes), so panels too
    static constexpr bool kTransposes16 = false;
    using Pairs = impl::EmulatedPairs<Avx2Vec>;
    static constexpr bool kNativePairs = false;
    __m256 lo, hi;

    static Avx2Vec zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static Avx2Vec broadcast(float value) { return {_mm256_set1_ps(value), _mm256_set1_ps(value)}; }
    static Avx2Vec load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
    static __m256 widen(const uint16_t* bf16) {
        const __m256i halves = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bf16)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(halves, 16));
    }
    static Avx2Vec load(const uint16_t* bf16) { return {widen(bf16), widen(bf16 + 8)}; }
    // 32 bf16 elements as 16 pairs, each 32 bits (element 2j low, 2j+1 high): the high half of each
    // is already an fp32, the low half shifted up is.
    static __m256i pairWords(const uint16_t* bf16) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bf16));
    }
    static __m256 oddOf(__m256i pairs) {
        return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(-65536)));
    }
    static __m256 evenOf(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
    static Avx2Vec loadOdd(const uint16_t* bf16) { return {oddOf(pairWords(bf16)), oddOf(pairWords(bf16 + 16))}; }
    static Avx2Vec loadEven(const uint16_t* bf16) { return {evenOf(pairWords(bf16)), evenOf(pairWords(bf16 + 16))}; }
    static Avx2Vec fma(const Avx2Vec& a, const Avx2Vec& b, const Avx2Vec& acc) {
        return {_mm256_fmadd_ps(a.lo, b.lo, acc.lo), _mm256_fmadd_ps(a.hi, b.hi, acc.hi)};
    }
    static Avx2Vec add(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
    }
    static Avx2Vec sub(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
    }
    static Avx2Vec mul(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
    }
    static Avx2Vec max(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)};
    }
    static Avx2Vec min(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)};
    }
    static __m256 pow2(__m256 n) {
        const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
    }
    static Avx2Vec pow2(const Avx2Vec& n) { return {pow2(n.lo), pow2(n.hi)}; }
    static Avx2Vec div(const Avx2Vec& a, const Avx2Vec& b) {
        return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)};
    }
    static __m256 roundBf16(__m256 x) {  // bits + 0x7FFF + (bit 16), low half cleared
        const __m256i bits = _mm256_castps_si256(x);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
        const __m256i bias = _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF));
        const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(bits, bias), _mm256_set1_epi32(-65536));
        const __m256 quietNan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
        return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), quietNan, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    }
    static Avx2Vec roundBf16(const Avx2Vec& x) { return {roundBf16(x.lo), roundBf16(x.hi)}; }
    void storeBf16(uint16_t* p) const {  // PACKUSDW interleaves 128-bit halves; the permute undoes it
        const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(lo), 16),
                                                   _mm256_srli_epi32(_mm256_castps_si256(hi), 16));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
    }
    static __m256 zeroBelow(__m256 x, float limit, __m256 y) {
        return _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_NLT_UQ), y);
    }
    static Avx2Vec zeroBelow(const Avx2Vec& x, float limit, const Avx2Vec& y) {
        return {zeroBelow(x.lo, limit, y.lo), zeroBelow(x.hi, limit, y.hi)};
    }
    float sum() const {
        const __m256 s8 = _mm256_add_ps(lo, hi);                                                // l[j] + l[j+8]
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // + 4
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // + 2
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                      // + 1
    }
    // out[i] = v[i].sum() for 8 vectors: sum()'s adds, each level on whole registers. 128-bit
    // halves are named h0, h1.
    static constexpr int kSideBySideSums = 8;
    static void sideBySideSums(const Avx2Vec* v, float* out) {
        __m256 s4[4], s2[2];
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {  // + 8, then + 4: v[2p]'s four -> s4[p].h0, v[2p+1]'s -> h1
            const __m256 a = _mm256_add_ps(v[2 * p].lo, v[2 * p].hi),
                         b = _mm256_add_ps(v[2 * p + 1].lo, v[2 * p + 1].hi);
            s4[p] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
        }
#pragma GCC unroll 2
        for (int r = 0; r < 2; ++r)  // + 2: half k of s2[r] holds v[4r + k]'s two, then v[4r + 2 + k]'s
            s2[r] = _mm256_add_ps(_mm256_shuffle_ps(s4[2 * r], s4[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(s4[2 * r], s4[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        // + 1: lane 4k + m holds v[2m + k]'s total; the permutation puts v[i]'s in lane i.
        const __m256 totals = _mm256_add_ps(_mm256_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                            _mm256_shuffle_ps(s2[0], s2[1], _MM_SHUFFLE(3, 1, 3, 1)));
        _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(totals, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0)));
    }
    void store(float* p) const {
        _mm256_storeu_ps(p, lo);
        _mm256_storeu_ps(p + 8, hi);
    }
};

}  // namespace

const KernelPath& avx2Path() {
    static const KernelPath path = kernelPathOf<Avx2Vec>(Isa::Avx2);
    return path;
}

}  // namespace kvscope::kernels
