// SPDX-License-Identifier: MIT
#pragma once
// The elementwise steps around the kernels (a linear's bias and rounding, SiLU-gate, the residual
// add, RMSNorm's scaling), 16 lanes at a time over the vector type V of invariant_impl.h. Each is
// the arithmetic torch's ops do, one IEEE fp32 operation at a time, each result rounded to the
// tensors' dtype as c10::BFloat16 rounds (nearest even; a NaN to 0x7FC0): the scalar loops this
// replaces converted element by element through c10::BFloat16, ~10 instructions each (a decode
// step's linears finished ~13k outputs a layer that way).
#include "core/kernels/invariant_attention_impl.h"

namespace kvscope::kernels::impl {
namespace {

// Element = uint16_t: bf16 bits, read widened (exact) and written rounded; float: as is.
template <typename V, typename Element>
void storeAs(const V& v, Element* out) {
    if constexpr (sizeof(Element) == sizeof(uint16_t))
        V::roundBf16(v).storeBf16(out);
    else
        v.store(out);
}

// out[i, i + 16) = f(load) for i in [0, n) by 16, where load(p) reads p[i, i + 16); a partial last
// step reads zero-padded copies and writes only its n % 16 results.
template <typename V, typename Out, typename F>
void eachStep(int64_t n, Out* out, const F& f) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) storeAs<V>(f([i](const auto* p) { return V::load(p + i); }), out + i);
    if (i == n) return;
    const int64_t left = n - i;
    auto padded = [i, left](const auto* p) { return loadPadded<V>(p + i, left); };
    Out buffer[kLanes];
    storeAs<V>(f(padded), buffer);
    memcpy(out + i, buffer, static_cast<size_t>(left) * sizeof(Out));
}

// out[i] = x[i] + bias[i] (no bias: x[i]), in the output's dtype.
template <typename V, typename Bias, typename Out>
void finishSums(const float* x, const Bias* bias, Out* out, int64_t n) {
    eachStep<V>(n, out, [&](auto load) { return bias ? V::add(load(x), load(bias)) : load(x); });
}

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) with the kernels' exp (exps(-g, 0)'s
// value: subtracting its zero shift changes no value, -0 included).
template <typename V, typename Element>
void siluGate(const Element* gate, const Element* up, Element* out, int64_t n) {
    eachStep<V>(n, out, [&](auto load) {
        const V g = load(gate);
        const V e = expOf<V>(V::mul(g, V::broadcast(-1.0f)));
        return V::mul(V::div(g, V::add(V::broadcast(1.0f), e)), load(up));
    });
}

// out[i] = x[i] + a[i], the residual add (out may be x).
template <typename V, typename Element>
void add(const Element* x, const Element* a, Element* out, int64_t n) {
    eachStep<V>(n, out, [&](auto load) { return V::add(load(x), load(a)); });
}

// RMSNorm's last step: out[i] = weight[i] * cast(x[i] * scale), the product rounded to the dtype
// before the weight multiplies it (as transformers' Qwen2RMSNorm: `weight * hidden.to(dtype)`).
template <typename V, typename Element>
void scaleByWeight(const float* x, float scale, const Element* weight, Element* out, int64_t n) {
    const V by = V::broadcast(scale);
    eachStep<V>(n, out, [&](auto load) {
        V normed = V::mul(load(x), by);
        if constexpr (sizeof(Element) == sizeof(uint16_t)) normed = V::roundBf16(normed);
        return V::mul(load(weight), normed);
    });
}

}  // namespace
}  // namespace kvscope::kernels::impl
