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

#ifdef KVSCOPE_KERNELS_X86
namespace amx {
void linearTiles(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t);
}
#endif
namespace scalar {
void linearTiles(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, int64_t, int64_t);
}

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
    avx512Path().linearPairs(x, 1, kIn, w, emulated, kOut, 0, kOut, nullptr);
    avx512bf16Path().linearPairs(x, 1, kIn, w, native, kOut, 0, kOut, nullptr);
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

const KernelPath& kernelPath(Isa isa) {
    if (static_cast<int>(isa) > static_cast<int>(widestOnThisCpu()))
        throw std::logic_error(std::string("kernel path ") + isaName(isa) + " is not available on this CPU");
#ifdef KVSCOPE_KERNELS_X86
    switch (isa) {
    case Isa::Avx512Bf16: return avx512bf16Path();
    case Isa::Avx512: return avx512Path();
    case Isa::Avx2: return avx2Path();
    case Isa::Scalar: break;
    }
#endif
    return scalarPath();
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

// On an Intel CPU fetching 4-32 KiB ahead into L2 brought a decode row's stream up to what reading
// alone reaches, and the hardware prefetcher alone or more streams fell short; on a Zen 4 fetching
// ahead was slower than its hardware prefetcher alone, so AMD CPUs keep that
// (docs/history/kernel-measurements.md, "Decode fetch distance" and "AVX-512 decode rows").
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
    const int64_t from = kernelPath(isa).panelFromRows;
    return from > 0 && rows >= from;
}

}  // namespace kvscope::kernels
