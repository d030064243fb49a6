// SPDX-License-Identifier: MIT
#pragma once
// The elementwise steps around the kernels (a linear's bias and rounding, SiLU-gate, the residual
// add, RMSNorm's scaling, RoPE), 16 lanes at a time over the vector type V of invariant_impl.h. Each is
// the arithmetic torch's ops do, one IEEE fp32 operation at a time, each result rounded to the
// tensors' dtype as c10::BFloat16 rounds (nearest even; a NaN to 0x7FC0): the scalar loops this
// replaces converted element by element through c10::BFloat16, ~10 instructions each (a decode
// step's linears finished ~13k outputs a layer that way).
#include "core/kernels/invariant_attention_impl.h"

namespace kvscope::kernels::impl {
namespace {

// Each instruction set's file compiles these templates in its own anonymous namespace (other
// target flags, other code) and instantiates the ones its kernels use: the rest are unused there.
// NOLINTBEGIN(clang-diagnostic-unused-template)

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

// RoPE (rotate-half) on `rows` rows of `heads` heads of D features, row s at angles
// cosines[s * D / 2 ...], sines[...]: (x1, x2) = (x[i], x[i + D/2]) -> (x1 cos - x2 sin,
// x2 cos + x1 sin), each product, difference and sum one IEEE operation in fp32, rounded to the
// dtype (out may be x: a head's two halves are read before either is written).
template <typename V, typename Element>
void rope(const Element* x, Element* out, int64_t rows, int64_t heads, int64_t D, const float* cosines,
          const float* sines) {
    const int64_t half = D / 2;
    auto rotate = [](const V& x1, const V& x2, const V& c, const V& s, V* first, V* second) {
        *first = V::sub(V::mul(x1, c), V::mul(x2, s));
        *second = V::add(V::mul(x2, c), V::mul(x1, s));
    };
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < heads; ++h) {
            const Element* row = x + (r * heads + h) * D;
            Element* dst = out + (r * heads + h) * D;
            const float* c = cosines + r * half;
            const float* s = sines + r * half;
            int64_t i = 0;
            for (; i + kLanes <= half; i += kLanes) {
                V first, second;
                rotate(V::load(row + i), V::load(row + half + i), V::load(c + i), V::load(s + i), &first, &second);
                storeAs<V>(first, dst + i);
                storeAs<V>(second, dst + half + i);
            }
            if (i == half) continue;
            const int64_t left = half - i;  // zero-padded copies; only the first `left` results are written
            V first, second;
            rotate(loadPadded<V>(row + i, left), loadPadded<V>(row + half + i, left), loadPadded<V>(c + i, left),
                   loadPadded<V>(s + i, left), &first, &second);
            Element firstOut[kLanes], secondOut[kLanes];
            storeAs<V>(first, firstOut);
            storeAs<V>(second, secondOut);
            memcpy(dst + i, firstOut, static_cast<size_t>(left) * sizeof(Element));
            memcpy(dst + half + i, secondOut, static_cast<size_t>(left) * sizeof(Element));
        }
}

// NOLINTEND(clang-diagnostic-unused-template)
}  // namespace
}  // namespace kvscope::kernels::impl
