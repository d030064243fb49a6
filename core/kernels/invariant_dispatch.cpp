// SPDX-License-Identifier: MIT
// Picks the instruction-set path at run time. The vector files are compiled for their instruction
// sets (core/CMakeLists.txt) and must only run on CPUs that have them.
#include "core/kernels/invariant.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#ifdef KVSCOPE_KERNELS_X86
#include <cpuid.h>
#endif
#include <stdexcept>
#include <string>

#include <sys/syscall.h>
#include <unistd.h>  // sysconf, syscall

namespace kvscope::kernels {

#define KVSCOPE_DECLARE_PATH(ns)                                                                                      \
    namespace ns {                                                                                                    \
    void linear(const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t, int64_t, const float*);       \
    void linear(const float*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t, const float*);    \
    void linear(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t, const float*); \
    int64_t packedRowsFloats(int64_t, int64_t, bool);                                                                 \
    int64_t packedRowTiles(int64_t);                                                                                  \
    void packRowTiles(const float*, int64_t, int64_t, int64_t, int64_t, float*);                                      \
    void packRowTiles(const uint16_t*, int64_t, int64_t, int64_t, int64_t, float*);                                   \
    void attention(const AttentionArgs<float>&, int64_t, int64_t, float*);                                            \
    void attention(const AttentionArgs<uint16_t>&, int64_t, int64_t, float*);                                         \
    float sumOfSquares(const float*, int64_t);                                                                        \
    void exps(const float*, float, float*, int64_t);                                                                  \
    void triad(float*, const float*, const float*, float, int64_t);                                                   \
    float readAll(const float*, int64_t, int64_t);                                                                    \
    int64_t multiplyAdds(int64_t, bool, float*);                                                                      \
    void finishSums(const float*, const float*, uint16_t*, int64_t);                                                  \
    void finishSums(const float*, const uint16_t*, uint16_t*, int64_t);                                               \
    void siluGate(const uint16_t*, const uint16_t*, uint16_t*, int64_t);                                              \
    void siluGate(const float*, const float*, float*, int64_t);                                                       \
    void add(const uint16_t*, const uint16_t*, uint16_t*, int64_t);                                                   \
    void add(const float*, const float*, float*, int64_t);                                                            \
    void scaleByWeight(const float*, float, const uint16_t*, uint16_t*, int64_t);                                     \
    void scaleByWeight(const float*, float, const float*, float*, int64_t);                                           \
    void rope(const uint16_t*, uint16_t*, int64_t, int64_t, int64_t, const float*, const float*);                     \
    void rope(const float*, float*, int64_t, int64_t, int64_t, const float*, const float*);                           \
    int64_t panelFromRows();                                                                                          \
    }
KVSCOPE_DECLARE_PATH(scalar)
#ifdef KVSCOPE_KERNELS_X86
KVSCOPE_DECLARE_PATH(avx2)
KVSCOPE_DECLARE_PATH(avx512)
KVSCOPE_DECLARE_PATH(avx512bf16)
namespace amx {
void linearTiles(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t);
}
#endif
namespace scalar {
void linearTiles(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t);
}
#undef KVSCOPE_DECLARE_PATH

namespace {

#ifdef KVSCOPE_KERNELS_X86
// The start-up probes' inputs: bf16 bit patterns from a fixed LCG, both signs, biased exponents in
// [lowestExponent, lowestExponent + exponents), random mantissas.
struct ProbeBits {
    uint32_t state;
    unsigned lowestExponent, exponents;
    uint16_t next() {
        state = state * 1664525u + 1013904223u;
        const uint32_t bits = state >> 8;
        return static_cast<uint16_t>((bits & 0x8000u) | ((lowestExponent + bits % exponents) << 7) |
                                     (bits >> 24 & 0x7Fu));
    }
};

// Whether this CPU's VDPBF16PS computes the pair order (invariant.h) as the AVX-512F path emulates
// it, on a fixed probe: 4 outputs of 80 elements (two chunks and a padded one), magnitudes from
// denormal to 2^13, both signs. Intel defines the instruction so and an AMD Zen 4 computes it so;
// a CPU that did not would still get the pair order's bits, from the emulation.
bool nativePairsAgree() {
    constexpr int64_t kIn = 80, kOut = 4;
    uint16_t x[kIn], w[kOut * kIn];
    ProbeBits bits{12345, 0, 141};
    for (uint16_t& v : x) v = bits.next();
    for (uint16_t& v : w) v = bits.next();
    float emulated[kOut], native[kOut];
    avx512::linear(x, 1, kIn, w, emulated, kOut, 0, kOut, nullptr);
    avx512bf16::linear(x, 1, kIn, w, native, kOut, 0, kOut, nullptr);
    return std::memcmp(emulated, native, sizeof native) == 0;
}
#endif

Isa widestOnThisCpu() {
#ifdef KVSCOPE_KERNELS_X86
    static const bool nativePairs =
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") && nativePairsAgree();
    if (nativePairs) return Isa::Avx512Bf16;
    if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
    return Isa::Scalar;
}

#ifdef KVSCOPE_KERNELS_X86
// CPUID leaf 7's EDX (0 where the CPU has no leaf 7), and its AMX bits.
constexpr unsigned kAmxBf16Bit = 1u << 22, kAmxTileBit = 1u << 24;
unsigned cpuidLeaf7Edx() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) ? d : 0;
}
#endif

// AMX-BF16: the Intel CPUs where VDPBF16PS was measured at half the FMA rate (Sapphire Rapids).
bool hasAmxBf16() {
#ifdef KVSCOPE_KERNELS_X86
    return (cpuidLeaf7Edx() & kAmxBf16Bit) != 0;
#else
    return false;
#endif
}

#ifdef KVSCOPE_KERNELS_X86
// Whether TDPBF16PS fed as invariant_amx.cpp feeds it gives the tile order's reference bits on a
// fixed probe: 3 rows, 35 outputs (two tiles and a ragged one) of 80 inputs (a padded chunk),
// magnitudes 2^-20..2^20, both signs.
bool amxAgreesWithTheReference() {
    constexpr int64_t kIn = 80, kOut = 35, kRows = 3;
    uint16_t x[kRows * kIn], w[kOut * kIn];
    ProbeBits bits{2024, 107, 41};
    for (uint16_t& v : x) v = bits.next();
    for (uint16_t& v : w) v = bits.next();
    float reference[kRows * kOut], tiles[kRows * kOut];
    scalar::linearTiles(x, kRows, kIn, w, reference, kOut, 0, kOut);
    amx::linearTiles(x, kRows, kIn, w, tiles, kOut, 0, kOut);
    return std::memcmp(reference, tiles, sizeof tiles) == 0;
}

// AMX-TILE and AMX-BF16, and the kernel's permission for this process to use the tile registers
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16 on).
bool amxGranted() {
    const unsigned amx = kAmxBf16Bit | kAmxTileBit;
    if ((cpuidLeaf7Edx() & amx) != amx) return false;
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}
#endif

// KVSCOPE_KERNEL_PATH=avx512|avx2|scalar narrows the choice, to measure a narrower path on a wider CPU
// (`kvscope bench`); the bits are the same on every path, so this changes speed only. (scalar also
// sends the tile order to its reference: bestTilePath.)
Isa narrowedByEnvironment(Isa widest) {
    const char* asked = std::getenv("KVSCOPE_KERNEL_PATH");
    if (!asked || !*asked) return widest;
    for (const Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16})
        if (std::strcmp(asked, isaName(isa)) == 0 && static_cast<int>(isa) <= static_cast<int>(widest)) return isa;
    return widest;
}

}  // namespace

Isa bestIsa() {
    static const Isa best = narrowedByEnvironment(widestOnThisCpu());
    return best;
}

Isa pairsPathForRows(Isa isa, int64_t rows) {
    // From kPairPanelFromRows rows the AVX-512F path computes the pair order as FMA panels
    // (invariant_impl.h's linearPairs); fewer rows stay on VDPBF16PS, which the emulation's tiles
    // do not beat.
    static const bool halfRatePairs = hasAmxBf16();
    return isa == Isa::Avx512Bf16 && rows >= kPairPanelFromRows && halfRatePairs ? Isa::Avx512 : isa;
}

bool amxTilesGranted() {
#ifdef KVSCOPE_KERNELS_X86
    static const bool granted = amxGranted();
    return granted;
#else
    return false;
#endif
}

bool amxTilesUsable() {
#ifdef KVSCOPE_KERNELS_X86
    static const bool usable = amxTilesGranted() && amxAgreesWithTheReference();
    return usable;
#else
    return false;
#endif
}

TilePath bestTilePath() {
    static const TilePath path = [] {
        const char* asked = std::getenv("KVSCOPE_KERNEL_PATH");
        const bool scalarAsked = asked && std::strcmp(asked, isaName(Isa::Scalar)) == 0;
        return amxTilesUsable() && !scalarAsked ? TilePath::Amx : TilePath::Scalar;
    }();
    return path;
}

void linearTiles(TilePath path, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y,
                 int64_t yStride, int64_t o0, int64_t o1) {
    if (path == TilePath::Scalar) return scalar::linearTiles(x, rows, in, w, y, yStride, o0, o1);
    if (!amxTilesGranted()) throw std::logic_error("kernel path amx is not available on this CPU");
#ifdef KVSCOPE_KERNELS_X86
    amx::linearTiles(x, rows, in, w, y, yStride, o0, o1);
#endif
}

const char* isaName(Isa isa) {
    switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512bf16";
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
#define KVSCOPE_ON_PATH(isa, expr)                     \
    onPath(isa, [&](Isa i) {                           \
        return i == Isa::Avx512Bf16 ? avx512bf16::expr \
               : i == Isa::Avx512   ? avx512::expr     \
               : i == Isa::Avx2     ? avx2::expr       \
                                    : scalar::expr;        \
    })
#else
#define KVSCOPE_ON_PATH(isa, expr) onPath(isa, [&](Isa) { return scalar::expr; })
#endif

void linear(Isa isa, const float* x, int64_t rows, int64_t in, const float* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1, const float* packedRows) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1, packedRows));
}
void linear(Isa isa, const float* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
            int64_t o1, const float* packedRows) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1, packedRows));
}
int64_t packedRowsFloats(Isa isa, int64_t rows, int64_t in, bool pairs) {
    return KVSCOPE_ON_PATH(isa, packedRowsFloats(rows, in, pairs));
}
int64_t packedRowTiles(Isa isa, int64_t rows) { return KVSCOPE_ON_PATH(isa, packedRowTiles(rows)); }
void packRowTiles(Isa isa, const float* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out) {
    KVSCOPE_ON_PATH(isa, packRowTiles(x, rows, in, tile0, tile1, out));
}
void packRowTiles(Isa isa, const uint16_t* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out) {
    KVSCOPE_ON_PATH(isa, packRowTiles(x, rows, in, tile0, tile1, out));
}
void attention(Isa isa, const AttentionArgs<float>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
void attention(Isa isa, const AttentionArgs<uint16_t>& a, int64_t begin, int64_t end, float* scores) {
    KVSCOPE_ON_PATH(isa, attention(a, begin, end, scores));
}
void linear(Isa isa, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride,
            int64_t o0, int64_t o1, const float* packedRows) {
    KVSCOPE_ON_PATH(isa, linear(x, rows, in, w, y, yStride, o0, o1, packedRows));
}
float sumOfSquares(Isa isa, const float* x, int64_t n) { return KVSCOPE_ON_PATH(isa, sumOfSquares(x, n)); }
void exps(Isa isa, const float* x, float shift, float* y, int64_t n) { KVSCOPE_ON_PATH(isa, exps(x, shift, y, n)); }
void triad(Isa isa, float* a, const float* b, const float* c, float s, int64_t n) {
    KVSCOPE_ON_PATH(isa, triad(a, b, c, s, n));
}
float readAll(Isa isa, const float* x, int64_t n, int64_t streams) {
    return KVSCOPE_ON_PATH(isa, readAll(x, n, streams));
}
int64_t multiplyAdds(Isa isa, int64_t rounds, bool pairs, float* sink) {
    return KVSCOPE_ON_PATH(isa, multiplyAdds(rounds, pairs, sink));
}
void finishSums(Isa isa, const float* x, const float* bias, uint16_t* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, finishSums(x, bias, out, n));
}
void finishSums(Isa isa, const float* x, const uint16_t* bias, uint16_t* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, finishSums(x, bias, out, n));
}
void siluGate(Isa isa, const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, siluGate(gate, up, out, n));
}
void siluGate(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, siluGate(gate, up, out, n));
}
void add(Isa isa, const uint16_t* x, const uint16_t* a, uint16_t* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, add(x, a, out, n));
}
void add(Isa isa, const float* x, const float* a, float* out, int64_t n) { KVSCOPE_ON_PATH(isa, add(x, a, out, n)); }
void scaleByWeight(Isa isa, const float* x, float scale, const uint16_t* weight, uint16_t* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, scaleByWeight(x, scale, weight, out, n));
}
void scaleByWeight(Isa isa, const float* x, float scale, const float* weight, float* out, int64_t n) {
    KVSCOPE_ON_PATH(isa, scaleByWeight(x, scale, weight, out, n));
}
void rope(Isa isa, const uint16_t* x, uint16_t* out, int64_t rows, int64_t heads, int64_t D, const float* cosines,
          const float* sines) {
    KVSCOPE_ON_PATH(isa, rope(x, out, rows, heads, D, cosines, sines));
}
void rope(Isa isa, const float* x, float* out, int64_t rows, int64_t heads, int64_t D, const float* cosines,
          const float* sines) {
    KVSCOPE_ON_PATH(isa, rope(x, out, rows, heads, D, cosines, sines));
}
int64_t cacheBytesForPanels() {
    static const int64_t bytes = [] {
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);  // glibc: from CPUID; 0 or -1 where unknown
        return l2 > 0 ? static_cast<int64_t>(l2) / 8 * 5 : int64_t{1} << 20;
    }();
    return bytes;
}
namespace {
bool isIntel() {
#ifdef KVSCOPE_KERNELS_X86
    unsigned highest = 0, vendor[3] = {};
    if (!__get_cpuid(0, &highest, &vendor[0], &vendor[2], &vendor[1])) return false;  // EBX, EDX, ECX
    return std::memcmp(vendor, "GenuineIntel", sizeof vendor) == 0;
#else
    return false;
#endif
}

// Measured with a throwaway matrix-vector loop of VDPBF16PS over 988 MB of bf16 rows (896 and 4864
// inputs), 2 threads, on an Emerald Rapids VM: 22-24 GB/s with the hardware prefetcher alone, 25-29
// with 2-8 streams a thread, 29-30 fetching 2 KiB ahead into L1 and 32-33 fetching 4-32 KiB ahead
// into L2, against 32-35 for reading alone. On a Zen 4 VM, fetching a row ahead into L1 was slower
// than the hardware prefetcher alone (invariant_avx512_vec.h), so AMD CPUs keep that.
constexpr int64_t kIntelDecodeFetchBytes = 8 << 10;
constexpr int64_t kMostDecodeFetchBytes = 1 << 20;

int64_t decodeFetchBytesAsked(const char* asked) {
    char* end = nullptr;
    errno = 0;
    const long long bytes = std::strtoll(asked, &end, 10);
    if (errno != 0 || end == asked || *end != '\0' || bytes < 0 || bytes > kMostDecodeFetchBytes)
        throw std::invalid_argument(std::string("KVSCOPE_DECODE_FETCH_BYTES='") + asked +
                                    "': expected a whole number of bytes from 0 to 1048576");
    return bytes;
}
}  // namespace

int64_t decodeFetchBytes() {
    static const int64_t bytes = [] {
        const char* asked = std::getenv("KVSCOPE_DECODE_FETCH_BYTES");
        if (asked && *asked) return decodeFetchBytesAsked(asked);
        return isIntel() ? kIntelDecodeFetchBytes : int64_t{0};
    }();
    return bytes;
}
bool widensWeightsItself(Isa isa, int64_t rows) {
    const int64_t from = KVSCOPE_ON_PATH(isa, panelFromRows());
    return from > 0 && rows >= from;
}

}  // namespace kvscope::kernels
