// SPDX-License-Identifier: MIT
// The tile order (core/kernels/invariant.h): its reference sums as the order says, AMX's TDPBF16PS
// (where this CPU lends it) gives the reference's bits on every shape, and an output's bits do not
// depend on the rows computed with it.
#include "core/kernels/invariant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace kvscope {
namespace {

using kernels::TilePath;

uint16_t bf16Of(float value) {  // truncation: any bf16 will do as test data
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return static_cast<uint16_t>(bits >> 16);
}
float widened(uint16_t bf16) {
    const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

std::vector<uint16_t> randomBf16(std::size_t n, std::mt19937& random) {
    std::normal_distribution<float> normal;
    std::vector<uint16_t> v(n);
    for (uint16_t& e : v) e = bf16Of(normal(random));
    return v;
}

// y[r][o] for the outputs [o0, o1) of w through `path`, into rows of yStride; what the call must not
// write holds a marker.
std::vector<float> tiles(TilePath path, const std::vector<uint16_t>& x, int64_t rows, int64_t in,
                         const std::vector<uint16_t>& w, int64_t o0, int64_t o1, int64_t yStride) {
    std::vector<float> y(static_cast<std::size_t>(rows * yStride), -7.0f);
    kernels::linearTiles(path, x.data(), rows, in, w.data(), y.data(), yStride, o0, o1);
    return y;
}

TEST(TileOrder, TheReferenceSumsEachHalfChunkFromZeroThenAddsIt) {
    // 64 inputs: chunk 0's even half, its odd half, chunk 1's even half, odd half. Each half's sum is
    // exact here except where 1 + 2^-24 rounds back to 1: in the order written, 1 + 2^-24 + 2^-24
    // is 1 and 1 in the first half, but 2^-24 + 2^-24 = 2^-23 survives as a half of its own.
    std::vector<uint16_t> x(64, bf16Of(1.0f)), w(64, 0);
    w[0] = bf16Of(1.0f), w[2] = bf16Of(std::ldexp(1.0f, -24)), w[4] = bf16Of(std::ldexp(1.0f, -24));  // even half
    w[1] = bf16Of(std::ldexp(1.0f, -24)), w[3] = bf16Of(std::ldexp(1.0f, -24));                        // odd half
    float y = 0;
    kernels::linearTiles(TilePath::Scalar, x.data(), 1, 64, w.data(), &y, 1, 0, 1);
    EXPECT_EQ(y, 1.0f + std::ldexp(1.0f, -23));  // (1 + 2^-24 + 2^-24 -> 1) + (2^-23) = 1 + 2^-23
    // A fixed 16-lane tree or one running sum over all 64 would give 1 (each 2^-24 lost against 1).
}

TEST(TileOrder, TheReferenceIsCloseToFloat64) {
    std::mt19937 random(5);
    const int64_t rows = 3, in = 903, out = 5;
    const std::vector<uint16_t> x = randomBf16(rows * in, random), w = randomBf16(out * in, random);
    const std::vector<float> y = tiles(TilePath::Scalar, x, rows, in, w, 0, out, out);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < in; ++k) {
                const double p = double{widened(x[r * in + k])} * widened(w[o * in + k]);
                exact += p, magnitude += std::abs(p);
            }
            EXPECT_NEAR(y[r * out + o], exact, 1e-5 * magnitude) << "row " << r << " output " << o;
        }
}

TEST(TileOrder, IsAnotherOrderThanThePairOrder) {
    // The same linear in both orders' references: close, and not the same bits on every output (a
    // tile order that were the pair order would make --kernels invariant-tiles a mere alias).
    std::mt19937 random(13);
    const int64_t rows = 4, in = 903, out = 8;
    const std::vector<uint16_t> x = randomBf16(rows * in, random), w = randomBf16(out * in, random);
    const std::vector<float> tileOrder = tiles(TilePath::Scalar, x, rows, in, w, 0, out, out);
    std::vector<float> pairOrder(static_cast<std::size_t>(rows * out));
    kernels::scalarPath().linearPairs(x.data(), rows, in, w.data(), pairOrder.data(), out, 0, out, nullptr);
    int differ = 0;
    for (std::size_t i = 0; i < tileOrder.size(); ++i) {
        differ += tileOrder[i] != pairOrder[i];
        EXPECT_NEAR(tileOrder[i], pairOrder[i], 1e-4 * (1 + std::abs(pairOrder[i])));
    }
    EXPECT_GT(differ, 0);
}

TEST(TileOrder, AmxEqualsTheReferenceBitForBit) {
    if (!kernels::amxTilesGranted())
        GTEST_SKIP() << "no AMX-BF16 here (or the kernel refused its tile state): only the reference runs";
    EXPECT_TRUE(kernels::amxTilesUsable()) << "the dispatcher's probe found TDPBF16PS off the tile order";
    std::mt19937 random(11);
    // Inputs: shorter than a chunk, one chunk, a ragged chunk, many; rows: decode's 1, a tile's 16,
    // ragged tiles, an odd count of tiles; outputs: ragged tiles, a range inside a wider matrix.
    for (const int64_t in : {1, 31, 32, 33, 100, 896, 903})
        for (const int64_t rows : {1, 2, 15, 16, 17, 40, 64, 97})
            for (const auto& [out, o0, o1] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 1},
                                              {16, 0, 16},
                                              {37, 0, 37},
                                              {70, 5, 69},
                                              {64, 32, 64}}) {
                const std::vector<uint16_t> x = randomBf16(rows * in, random), w = randomBf16(out * in, random);
                const int64_t yStride = out + 3;
                EXPECT_EQ(tiles(TilePath::Amx, x, rows, in, w, o0, o1, yStride),
                          tiles(TilePath::Scalar, x, rows, in, w, o0, o1, yStride))
                    << "in=" << in << " rows=" << rows << " out=" << out << " [" << o0 << ", " << o1 << ")";
            }
}

TEST(TileOrder, AnAmxRowIsTheSameAloneOrInABatchOfUpTo512) {
    if (!kernels::amxTilesGranted())
        GTEST_SKIP() << "no AMX-BF16 here (or the kernel refused its tile state): the reference has no batches";
    std::mt19937 random(12);
    const int64_t in = 4864, out = 45;  // wide inputs: input rows packed in groups of tiles
    const std::vector<uint16_t> batch = randomBf16(512 * in, random), w = randomBf16(out * in, random);
    const std::vector<float> all = tiles(TilePath::Amx, batch, 512, in, w, 0, out, out);
    for (const int64_t rows : {1, 2, 15, 16, 17, 63, 200, 512}) {
        const int64_t first = (rows * 7) % (512 - rows + 1);
        const std::vector<uint16_t> part(batch.begin() + first * in, batch.begin() + (first + rows) * in);
        const std::vector<float> y = tiles(TilePath::Amx, part, rows, in, w, 0, out, out);
        EXPECT_TRUE(std::equal(y.begin(), y.end(), all.begin() + first * out)) << "rows=" << rows;
    }
}

}  // namespace
}  // namespace kvscope
