// SPDX-License-Identifier: MIT
// The reference path: the fixed orders in plain C++ (std::fma per lane), what the vector paths must
// equal bit for bit; the pair order's flushing is the MXCSR's here too (impl::FlushDenormals). Compiled with -ffp-contract=off like the other two files, so the compiler
// fuses nothing that the order does not.
#include "core/kernels/invariant_path.h"

#include <cmath>
#include <cstring>

namespace kvscope::kernels {
namespace {

struct ScalarVec {
    static constexpr int kRows = 1, kCols = 1, kDecodeCols = 1, kDecodeStreams = 1, kValueRows = 1;
    static constexpr bool kDecodeFetchesAhead = true;
    static constexpr int kSideBySideSums = 1;  // each tree as written in sum()
    static constexpr int kPanelFromRows = 0;  // the reference is dotTile's order as written
    static constexpr bool kPanelForPairs = false;
    using Pairs = impl::EmulatedPairs<ScalarVec>;
    static constexpr bool kNativePairs = false;
    float lane[impl::kLanes];

    static ScalarVec zero() { return broadcast(0.0f); }
    static ScalarVec broadcast(float value) {
        ScalarVec v;
        for (float& l : v.lane) l = value;
        return v;
    }
    static ScalarVec load(const float* p) {
        ScalarVec v;
        std::memcpy(v.lane, p, sizeof v.lane);
        return v;
    }
    static ScalarVec load(const uint16_t* bf16) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) v.lane[j] = impl::widened(bf16[j]);
        return v;
    }
    // Lane j of 32 bf16 elements' pairs: element 2j+1, or 2j.
    static ScalarVec loadOdd(const uint16_t* bf16) { return pairHalf(bf16, 1); }
    static ScalarVec loadEven(const uint16_t* bf16) { return pairHalf(bf16, 0); }
    static ScalarVec pairHalf(const uint16_t* bf16, int odd) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) v.lane[j] = impl::widened(bf16[2 * j + odd]);
        return v;
    }
    static ScalarVec fma(const ScalarVec& a, const ScalarVec& b, const ScalarVec& acc) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) v.lane[j] = std::fma(a.lane[j], b.lane[j], acc.lane[j]);
        return v;
    }
    template <typename Op>
    static ScalarVec perLane(const ScalarVec& a, const ScalarVec& b, Op op) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) v.lane[j] = op(a.lane[j], b.lane[j]);
        return v;
    }
    static ScalarVec add(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x + y; });
    }
    static ScalarVec sub(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x - y; });
    }
    static ScalarVec mul(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x * y; });
    }
    // As MAXPS and MINPS: the second operand when the comparison fails (a NaN among them).
    static ScalarVec max(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x > y ? x : y; });
    }
    static ScalarVec min(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x < y ? x : y; });
    }
    static ScalarVec pow2(const ScalarVec& n) {  // n integral in [-126, 127]; a NaN gives any value
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) {
            const int32_t exponent = n.lane[j] == n.lane[j] ? static_cast<int32_t>(n.lane[j]) : 0;
            const uint32_t bits = static_cast<uint32_t>(exponent + 127) << 23;
            std::memcpy(&v.lane[j], &bits, sizeof bits);
        }
        return v;
    }
    static ScalarVec div(const ScalarVec& a, const ScalarVec& b) {
        return perLane(a, b, [](float x, float y) { return x / y; });
    }
    // To bf16 as c10::BFloat16 rounds: to nearest even, a NaN to 0x7FC0 (kept as an fp32 whose low
    // 16 bits are zero).
    static ScalarVec roundBf16(const ScalarVec& x) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) {
            uint32_t bits;
            std::memcpy(&bits, &x.lane[j], sizeof bits);
            bits = x.lane[j] != x.lane[j] ? 0x7FC00000u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
            std::memcpy(&v.lane[j], &bits, sizeof bits);
        }
        return v;
    }
    void storeBf16(uint16_t* p) const {  // the top halves (a roundBf16 result's whole value)
        for (int j = 0; j < impl::kLanes; ++j) {
            uint32_t bits;
            std::memcpy(&bits, &lane[j], sizeof bits);
            p[j] = static_cast<uint16_t>(bits >> 16);
        }
    }
    static ScalarVec zeroBelow(const ScalarVec& x, float limit, const ScalarVec& y) {
        ScalarVec v;
        for (int j = 0; j < impl::kLanes; ++j) v.lane[j] = x.lane[j] < limit ? 0.0f : y.lane[j];
        return v;
    }
    float sum() const {  // the tree: +8, +4, +2, +1
        float s[8];
        for (int j = 0; j < 8; ++j) s[j] = lane[j] + lane[j + 8];
        for (int j = 0; j < 4; ++j) s[j] = s[j] + s[j + 4];
        for (int j = 0; j < 2; ++j) s[j] = s[j] + s[j + 2];
        return s[0] + s[1];
    }
    void store(float* p) const { std::memcpy(p, lane, sizeof lane); }
};

}  // namespace

const KernelPath& scalarPath() {
    static const KernelPath path = kernelPathOf<ScalarVec>(Isa::Scalar);
    return path;
}

namespace scalar {
// The tile order (invariant.h) as written: per chunk of 32, the even half's sum from zero, then the
// odd half's, each added to the output's sum; padding is +0 x +0.
void linearTiles(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    const impl::FlushDenormals flushed;
    auto element = [in](const uint16_t* row, int64_t k) { return k < in ? impl::widened(row[k]) : 0.0f; };
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = o0; o < o1; ++o) {
            const uint16_t *xr = x + r * in, *wo = w + o * in;
            float total = 0;
            for (int64_t chunk = 0; chunk < in; chunk += 32)
                for (int64_t half = 0; half < 2; ++half) {
                    float sum = 0;
                    for (int64_t k = chunk + half; k < chunk + 32; k += 2)
                        sum = std::fma(element(xr, k), element(wo, k), sum);
                    total = total + sum;
                }
            y[r * yStride + o] = total;
        }
}
}  // namespace scalar

}  // namespace kvscope::kernels
