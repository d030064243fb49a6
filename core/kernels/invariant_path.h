// SPDX-License-Identifier: MIT
#pragma once
// An instruction-set path's entry points from the templates of invariant_impl.h,
// invariant_attention_impl.h, invariant_elementwise_impl.h and invariant_probes_impl.h; each
// invariant_*.cpp defines its vector type, then uses the macro.
#include "core/kernels/invariant_elementwise_impl.h"
#include "core/kernels/invariant_probes_impl.h"

// The entry points of one instruction-set path, namespace `ns`, on vector type `V` (declared again
// in invariant_dispatch.cpp). Used once at the end of each invariant_*.cpp, in kvscope::kernels.
#define KVSCOPE_DEFINE_KERNEL_PATH(ns, V)                                                                              \
    namespace ns {                                                                                                     \
    void linear(const float* x, int64_t rows, int64_t in, const float* w, float* y, int64_t yStride, int64_t o0,       \
                int64_t o1, const float* packed) {                                                                     \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1, packed);                                                   \
    }                                                                                                                  \
    void linear(const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,    \
                int64_t o1, const float* packed) {                                                                     \
        impl::linear<V>(x, rows, in, w, y, yStride, o0, o1, packed);                                                   \
    }                                                                                                                  \
    void linear(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0, \
                int64_t o1, const float* packed) {                                                                     \
        impl::linearPairs<V>(x, rows, in, w, y, yStride, o0, o1, packed);                                              \
    }                                                                                                                  \
    int64_t packedRowsFloats(int64_t rows, int64_t in, bool pairs) {                                                   \
        return impl::packedRowsFloats<V>(rows, in, pairs);                                                             \
    }                                                                                                                  \
    int64_t packedRowTiles(int64_t rows) { return impl::packedRowTiles<V>(rows); }                                     \
    void packRowTiles(const float* x, int64_t rows, int64_t in, int64_t t0, int64_t t1, float* out) {                  \
        impl::packRowTiles<V>(x, rows, in, t0, t1, out);                                                               \
    }                                                                                                                  \
    void packRowTiles(const uint16_t* x, int64_t rows, int64_t in, int64_t t0, int64_t t1, float* out) {               \
        impl::packRowTiles<V>(x, rows, in, t0, t1, out);                                                               \
    }                                                                                                                  \
    void attention(const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {                         \
        impl::attention<V>(a, begin, end, scores);                                                                     \
    }                                                                                                                  \
    void attention(const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {                      \
        impl::attention<V>(a, begin, end, scores);                                                                     \
    }                                                                                                                  \
    float sumOfSquares(const float* x, int64_t n) { return impl::sumOfSquares<V>(x, n); }                              \
    void exps(const float* x, float shift, float* y, int64_t n) { impl::exps<V>(x, shift, y, n); }                     \
    void triad(float* a, const float* b, const float* c, float s, int64_t n) { impl::triad<V>(a, b, c, s, n); }        \
    float readAll(const float* x, int64_t n, int64_t streams) { return impl::readAll<V>(x, n, streams); }              \
    int64_t multiplyAdds(int64_t rounds, bool pairs, float* sink) {                                                    \
        return impl::multiplyAdds<V>(rounds, pairs, sink);                                                             \
    }                                                                                                                  \
    void finishSums(const float* x, const float* bias, uint16_t* out, int64_t n) {                                     \
        impl::finishSums<V>(x, bias, out, n);                                                                          \
    }                                                                                                                  \
    void finishSums(const float* x, const uint16_t* bias, uint16_t* out, int64_t n) {                                  \
        impl::finishSums<V>(x, bias, out, n);                                                                          \
    }                                                                                                                  \
    void siluGate(const uint16_t* g, const uint16_t* u, uint16_t* out, int64_t n) { impl::siluGate<V>(g, u, out, n); } \
    void siluGate(const float* g, const float* u, float* out, int64_t n) { impl::siluGate<V>(g, u, out, n); }          \
    void add(const uint16_t* x, const uint16_t* a, uint16_t* out, int64_t n) { impl::add<V>(x, a, out, n); }           \
    void add(const float* x, const float* a, float* out, int64_t n) { impl::add<V>(x, a, out, n); }                    \
    void scaleByWeight(const float* x, float scale, const uint16_t* w, uint16_t* out, int64_t n) {                     \
        impl::scaleByWeight<V>(x, scale, w, out, n);                                                                   \
    }                                                                                                                  \
    void scaleByWeight(const float* x, float scale, const float* w, float* out, int64_t n) {                           \
        impl::scaleByWeight<V>(x, scale, w, out, n);                                                                   \
    }                                                                                                                  \
    void rope(const uint16_t* x, uint16_t* out, int64_t rows, int64_t heads, int64_t D, const float* c,                \
              const float* s) {                                                                                        \
        impl::rope<V>(x, out, rows, heads, D, c, s);                                                                   \
    }                                                                                                                  \
    void rope(const float* x, float* out, int64_t rows, int64_t heads, int64_t D, const float* c, const float* s) {    \
        impl::rope<V>(x, out, rows, heads, D, c, s);                                                                   \
    }                                                                                                                  \
    int64_t panelFromRows() { return V::kPanelFromRows; }                                                              \
    }
