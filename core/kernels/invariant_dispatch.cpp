// SPDX-License-Identifier: MIT
// Picks the instruction-set path at run time. The vector files are compiled for their instruction
// sets (core/CMakeLists.txt) and must only run on CPUs that have them.
#include "core/kernels/invariant.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace kvscope::kernels {

#define KVSCOPE_DECLARE_PATH(ns)                                                                     \
    namespace ns {                                                                                   \
    void linear(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t, int64_t);    \
    void linear(const float*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t); \
    void attention(const AttentionArgs<float>&, int64_t, int64_t, float*);                           \
    void attention(const AttentionArgs<uint16_t>&, int64_t, int64_t, float*);                        \
    float sumOfSquares(const float*, int64_t);                                                       \
    void triad(float*, const float*, const float*, float, int64_t);                                  \
    float readAll(const float*, int64_t);                                                            \
    int64_t panelFromRows();                                                                         \
    }
KVSCOPE_DECLARE_PATH(scalar)
#ifdef KVSCOPE_KERNELS_X86
KVSCOPE_DECLARE_PATH(avx2)
KVSCOPE_DECLARE_PATH(avx512)
#endif
#undef KVSCOPE_DECLARE_PATH

namespace {

Isa widestOnThisCpu() {
#ifdef KVSCOPE_KERNELS_X86
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
    return Isa::Scalar;
}

// KVSCOPE_KERNEL_PATH=avx2|scalar narrows the choice, to measure a narrower path on a wider CPU
// (`kvscope bench`); the bits are the same on every path, so this changes speed only.
Isa narrowedByEnvironment(Isa widest) {
    const char* asked = std::getenv("KVSCOPE_KERNEL_PATH");
    if (!asked || !*asked) return widest;
    for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
        if (std::strcmp(asked, isaName(isa)) == 0 && static_cast<int>(isa) <= static_cast<int>(widest)) return isa;
    return widest;
}

}  // namespace

Isa bestIsa() {
    static const Isa best = narrowedByEnvironment(widestOnThisCpu());
    return best;
}

const char* isaName(Isa isa) {
    switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    }
    return "?";
}

namespace {
// Calls the path for `isa`; asking for one this CPU cannot run is a programming error.
template <typename Call>
auto onPath(Isa isa, Call call) {
    if (static_cast<int>(isa) > static_cast<int>(widestOnThisCpu()))
        throw std::logic_error(std::string("kernel path ") + isaName(isa) + " is not available on this CPU");
    return call(isa);
}
}  // namespace

#ifdef KVSCOPE_KERNELS_X86
#define KVSCOPE_ON_PATH(isa, expr) \
    onPath(isa, [&](Isa i) { return i == Isa::Avx512 ? avx512::expr : i == Isa::Avx2 ? avx2::expr : scalar::expr; })
#else
#define KVSCOPE_ON_PATH(isa, expr) onPath(isa, [&](Isa) { return scalar::expr; })
#endif

void linear(Isa isa, const float* x, int64_t rows, int64_t in, const float* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1));
}
void linear(Isa isa, const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1));
}
void attention(Isa isa, const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
void attention(Isa isa, const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
float sumOfSquares(Isa isa, const float* x, int64_t n) { return KVSCOPE_ON_PATH(isa, sumOfSquares(x, n)); }
void triad(Isa isa, float* a, const float* b, const float* c, float s, int64_t n) {
    KVSCOPE_ON_PATH(isa, triad(a, b, c, s, n));
}
float readAll(Isa isa, const float* x, int64_t n) { return KVSCOPE_ON_PATH(isa, readAll(x, n)); }
bool widensWeightsItself(Isa isa, int64_t rows) {
    const int64_t from = KVSCOPE_ON_PATH(isa, panelFromRows());
    return from > 0 && rows >= from;
}

}  // namespace kvscope::kernels
