// SPDX-License-Identifier: MIT
// Picks the instruction-set path at run time. The vector files are compiled for their instruction
// sets (core/CMakeLists.txt) and must only run on CPUs that have them.
#include "core/kernels/invariant.h"

#include <stdexcept>

namespace kvscope::kernels {

#define KVSCOPE_DECLARE_PATH(ns)                                                                                 \
    namespace ns {                                                                                               \
    void linear(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t, int64_t);                \
    void linear(const float*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t);             \
    void attention(const AttentionArgs<float>&, int64_t, int64_t, float*);                                                    \
    void attention(const AttentionArgs<uint16_t>&, int64_t, int64_t, float*);                                              \
    float sumOfSquares(const float*, int64_t);                                                                   \
    }
KVSCOPE_DECLARE_PATH(scalar)
#ifdef KVSCOPE_KERNELS_X86
KVSCOPE_DECLARE_PATH(avx2)
KVSCOPE_DECLARE_PATH(avx512)
#endif
#undef KVSCOPE_DECLARE_PATH

Isa bestIsa() {
#ifdef KVSCOPE_KERNELS_X86
    static const Isa best = __builtin_cpu_supports("avx512f")                                     ? Isa::Avx512
                            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::Avx2
                                                                                              : Isa::Scalar;
    return best;
#else
    return Isa::Scalar;
#endif
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
    if (isa != Isa::Scalar && static_cast<int>(isa) > static_cast<int>(bestIsa()))
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
void linear(Isa isa, const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride,
            int64_t o0, int64_t o1) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1));
}
void attention(Isa isa, const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
void attention(Isa isa, const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
float sumOfSquares(Isa isa, const float* x, int64_t n) { return KVSCOPE_ON_PATH(isa, sumOfSquares(x, n)); }

}  // namespace kvscope::kernels
