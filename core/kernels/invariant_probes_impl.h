// SPDX-License-Identifier: MIT
#pragma once
// The loops behind `kvscope bench`'s machine probes (core/bench/machine_probes.h), over the vector
// type V of invariant_impl.h, so that each instruction-set path measures with its own vectors: the
// STREAM triad, a vectorised read of several streams side by side, and the multiply-add rate of the
// chains the linear tile keeps busy, in either order. Internal linkage, like everything the paths
// include (invariant_impl.h says why).
#include "core/kernels/invariant_impl.h"

namespace kvscope::kernels::impl {
namespace {

// Each instruction set's file compiles these templates in its own anonymous namespace (other
// target flags, other code) and instantiates the ones its kernels use: the rest are unused there.
// NOLINTBEGIN(clang-diagnostic-unused-template)

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

// NOLINTEND(clang-diagnostic-unused-template)
}  // namespace
}  // namespace kvscope::kernels::impl
