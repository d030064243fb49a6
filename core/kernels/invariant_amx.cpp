// SPDX-License-Identifier: MIT
// The tile order (invariant.h) on AMX: TDPBF16PS with the weights as the A tile, read in place from
// their rows, and the inputs as the B tile, one product of each pair zero. Compiled with
// -mamx-tile -mamx-bf16 -mavx512f -mavx512bw; called only where the dispatcher found AMX usable.
//
// Tiles: C[a][b] = tile 2a + b (a: a tile of 16 outputs, b: a tile of up to 16 input rows);
// A[a] = tile 4 + a: 16 weight rows x 32 inputs; B = tile 6 (+ 7): for 16 pairs j and each input row
// t, the dword (x[t][32c + 2j], 0) (the even half of chunk c) or (0, x[t][32c + 2j + 1]) (the odd
// half). TDPBF16PS then sums each output's 16 products of one half from zero and adds the sum to C:
// the tile order's step, measured bit for bit against impl's reference (invariant_scalar.cpp).
#include "core/kernels/invariant.h"
#include "core/kernels/invariant_avx512_vec.h"  // Avx512Vec::transpose16

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

// GCC's macros, then clang's.
#if !(defined(__AMX_TILE__) && defined(__AMX_BF16__)) && !(defined(__AMXTILE__) && defined(__AMXBF16__))
#error "invariant_amx.cpp must be compiled with -mamx-tile -mamx-bf16"
#endif

namespace kvscope::kernels::amx {
namespace {

constexpr int kTileRows = 16;       // outputs of an A and C tile; pairs of a B tile
constexpr int64_t kChunk = 32;      // inputs an A tile covers: 16 pairs
constexpr int kHalfDwords = 16 * 16;  // a B tile of 16 pairs x 16 columns

// LDTILECFG's 64-byte operand (palette 1).
struct TileConfig {
    uint8_t palette = 1, startRow = 0;
    uint8_t reserved[14] = {};
    uint16_t bytesPerRow[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// C and B tiles `columns` wide (input rows at once: 1..16), A tiles 32 inputs; for this thread until
// the guard ends (TILERELEASE, so that AMX's state is not saved at every context switch after).
class Tiles {
public:
    explicit Tiles(int columns) {
        TileConfig config;
        for (int t = 0; t < 8; ++t) {
            config.rows[t] = kTileRows;
            config.bytesPerRow[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 64 : 4 * columns);
        }
        _tile_loadconfig(&config);
    }
    ~Tiles() { _tile_release(); }
    Tiles(const Tiles&) = delete;
    Tiles& operator=(const Tiles&) = delete;
};

// Where a tile of 16 outputs reads its A tiles: chunks [0, fromRows) straight from the weight rows,
// the rest (a ragged last chunk, or every chunk of a ragged last tile) from a zero-padded copy, so
// that padding multiplies +0 by +0 as the reference does and no read passes the weights' end.
class WeightTile {
public:
    // Rows [o, o + outputs) of w (outputs: 0..16; none: an unused tile).
    WeightTile(const uint16_t* w, int64_t in, int64_t o, int64_t outputs) : chunks_((in + kChunk - 1) / kChunk) {
        if (outputs == 0) return;
        if (outputs == kTileRows) {
            rows_ = w + o * in, stride_ = in, fromRows_ = in / kChunk;
            if (fromRows_ < chunks_)
                copy(w + o * in + fromRows_ * kChunk, in, outputs, in - fromRows_ * kChunk, kChunk);
            return;
        }
        copy(w + o * in, in, outputs, in, chunks_ * kChunk);
    }
    int64_t chunks() const { return chunks_; }
    const uint16_t* chunk(int64_t c) const {
        return c < fromRows_ ? rows_ + c * kChunk : padded_.data() + (c - fromRows_) * kChunk;
    }
    int64_t strideBytes(int64_t c) const { return 2 * (c < fromRows_ ? stride_ : paddedStride_); }

private:
    // 16 rows of `width` elements from rows of `in`, zero beyond `count` elements or `outputs` rows.
    void copy(const uint16_t* from, int64_t in, int64_t outputs, int64_t count, int64_t width) {
        padded_.assign(static_cast<size_t>(kTileRows * width), 0);
        paddedStride_ = width;
        for (int64_t r = 0; r < outputs; ++r)
            std::memcpy(padded_.data() + r * width, from + r * in, static_cast<size_t>(count) * sizeof(uint16_t));
    }
    int64_t chunks_;
    const uint16_t* rows_ = nullptr;
    int64_t stride_ = 0, fromRows_ = 0, paddedStride_ = 0;
    std::vector<uint16_t> padded_;
};

// A full tile's B halves for its whole chunks: 16 rows' 16 pairs a chunk, transposed in registers
// so that vector j holds pair j of every row, then split into the even and the odd half.
void packFullTile(const uint16_t* x, int64_t in, int64_t t0, int64_t wholeChunks, uint32_t* out) {
    const __m512i evenHalves = _mm512_set1_epi32(0xFFFF), oddHalves = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int64_t c = 0; c < wholeChunks; ++c) {
        Avx512Vec pairs[kTileRows];
        for (int t = 0; t < kTileRows; ++t)
            pairs[t].v = _mm512_castsi512_ps(_mm512_loadu_si512(x + (t0 + t) * in + c * kChunk));
        Avx512Vec::transpose16(pairs);
        uint32_t* even = out + 2 * c * kHalfDwords;
        for (int j = 0; j < kTileRows; ++j) {
            const __m512i pair = _mm512_castps_si512(pairs[j].v);
            _mm512_storeu_si512(even + j * kTileRows, _mm512_and_si512(pair, evenHalves));
            _mm512_storeu_si512(even + kHalfDwords + j * kTileRows, _mm512_and_si512(pair, oddHalves));
        }
    }
}

// The B tiles of input rows [t0, t0 + count) (count <= columns, the rest zero columns): for each
// chunk, its even half then its odd half, each 16 pairs x `columns` dwords. A pair of inputs is one
// dword of the row; its even element is the low half. A full tile's whole chunks by packFullTile,
// the rest (a ragged chunk, fewer rows) element by element (docs/history/kernel-measurements.md,
// "AMX input packing").
void packInputs(const uint16_t* x, int64_t in, int64_t t0, int64_t count, int columns, int64_t chunks, uint32_t* out) {
    const int64_t halfDwords = kTileRows * columns, wholePairs = in / 2;
    const int64_t vectorChunks = columns == kTileRows && count == kTileRows ? in / kChunk : 0;
    if (vectorChunks > 0) packFullTile(x, in, t0, vectorChunks, out);
    std::memset(out + vectorChunks * 2 * halfDwords, 0,
                static_cast<size_t>((chunks - vectorChunks) * 2 * halfDwords) * sizeof(uint32_t));
    for (int64_t t = 0; t < count; ++t) {
        const uint16_t* row = x + (t0 + t) * in;
        uint32_t* even = out + t;
        for (int64_t p = vectorChunks * kChunk / 2; p < wholePairs; ++p) {
            uint32_t pair;
            std::memcpy(&pair, row + 2 * p, sizeof pair);
            uint32_t* at = even + (p / kTileRows) * 2 * halfDwords + (p % kTileRows) * columns;
            at[0] = pair & 0xFFFFu;
            at[halfDwords] = pair & 0xFFFF0000u;
        }
        if (in % 2 != 0)  // a last even element without its odd one
            even[(wholePairs / kTileRows) * 2 * halfDwords + (wholePairs % kTileRows) * columns] = row[in - 1];
    }
}

// y[t][o] for a C tile [16 outputs][columns input rows] stored at `c`: its first `outputs` x `count`.
void storeTransposed(const float* c, int columns, int64_t outputs, int64_t count, float* y, int64_t yStride) {
    for (int64_t t = 0; t < count; ++t)
        for (int64_t o = 0; o < outputs; ++o) y[t * yStride + o] = c[o * columns + t];
}

// OutTiles x InTiles C tiles over every chunk: weight tiles a[0..OutTiles), input tiles whose packed
// halves start at b[0..InTiles) (2 * kTileRows * columns dwords a chunk). Results to c[a][b] as
// [16][columns] floats each.
template <int OutTiles, int InTiles>
void multiply(const WeightTile* a, const uint32_t* const* b, int columns, float* c) {
    const int64_t halfDwords = kTileRows * columns, bStride = 4 * columns;
    _tile_zero(0);
    if constexpr (InTiles == 2) _tile_zero(1);
    if constexpr (OutTiles == 2) _tile_zero(2);
    if constexpr (OutTiles == 2 && InTiles == 2) _tile_zero(3);
    for (int64_t k = 0; k < a[0].chunks(); ++k) {
        _tile_loadd(4, a[0].chunk(k), a[0].strideBytes(k));
        if constexpr (OutTiles == 2) _tile_loadd(5, a[1].chunk(k), a[1].strideBytes(k));
        for (int half = 0; half < 2; ++half) {
            const int64_t at = (2 * k + half) * halfDwords;
            _tile_loadd(6, b[0] + at, bStride);
            if constexpr (InTiles == 2) _tile_loadd(7, b[1] + at, bStride);
            _tile_dpbf16ps(0, 4, 6);
            if constexpr (InTiles == 2) _tile_dpbf16ps(1, 4, 7);
            if constexpr (OutTiles == 2) _tile_dpbf16ps(2, 5, 6);
            if constexpr (OutTiles == 2 && InTiles == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
    const int64_t tile = kTileRows * columns;
    _tile_stored(0, c, bStride);
    if constexpr (InTiles == 2) _tile_stored(1, c + tile, bStride);
    if constexpr (OutTiles == 2) _tile_stored(2, c + 2 * tile, bStride);
    if constexpr (OutTiles == 2 && InTiles == 2) _tile_stored(3, c + 3 * tile, bStride);
}

// One input row (a decode step): memory bound, and TDPBF16PS's tile loads keep fewer misses in
// flight than vector loads (computing the order by AVX-512 FMAs on transposed rows instead was
// slower still, its shuffles and chains in the way). Two streams a thread, the first and the second
// half of the outputs side by side. Prefetching measured no gain: neither the same tile's chunks a
// few ahead nor each stream's next tile into L2; nor did staging a tile's 16 rows in L1 by vector
// loads before the tile load (docs/history/kernel-measurements.md, "AMX decode rows").
void oneRow(const uint16_t* x, int64_t in, const uint16_t* w, float* y, int64_t o0, int64_t o1) {
    const int64_t chunks = (in + kChunk - 1) / kChunk;
    std::vector<uint32_t> packed(static_cast<size_t>(chunks * 2 * kTileRows));
    packInputs(x, in, 0, 1, 1, chunks, packed.data());
    const uint32_t* b[2] = {packed.data(), nullptr};
    float c[4 * kHalfDwords];
    const Tiles tiles(1);
    const int64_t half = ((o1 - o0 + 1) / 2 + kTileRows - 1) / kTileRows * kTileRows;
    for (int64_t o = o0; o < o0 + half && o < o1; o += kTileRows) {
        const int64_t outputs0 = std::min<int64_t>(kTileRows, o1 - o), second = o + half;
        const int64_t outputs1 = std::clamp<int64_t>(o1 - second, 0, kTileRows);
        const WeightTile a[2] = {WeightTile(w, in, o, outputs0), WeightTile(w, in, second, outputs1)};
        if (outputs1 > 0)
            multiply<2, 1>(a, b, 1, c);
        else
            multiply<1, 1>(a, b, 1, c);
        std::memcpy(y + o, c, static_cast<size_t>(outputs0) * sizeof(float));
        if (outputs1 > 0) std::memcpy(y + second, c + 2 * kTileRows, static_cast<size_t>(outputs1) * sizeof(float));
    }
}

}  // namespace

// The input rows' tiles go in groups whose packed halves fit about half of `cacheBytesForPanels`;
// each group passes once over the outputs [o0, o1), two tiles of 16 at a time.
void linearTiles(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride, int64_t o0,
                 int64_t o1) {
    if (rows <= 0 || o1 <= o0) return;
    if (rows == 1) return oneRow(x, in, w, y, o0, o1);
    const int columns = static_cast<int>(std::min<int64_t>(rows, kTileRows));
    const int64_t chunks = (in + kChunk - 1) / kChunk, tileDwords = chunks * 2 * kTileRows * columns;
    const int64_t inputTiles = (rows + columns - 1) / columns;
    const int64_t perGroup =
        std::clamp<int64_t>(cacheBytesForPanels() / 2 / (tileDwords * 4) / 2 * 2, 2, inputTiles + inputTiles % 2);
    std::vector<uint32_t> packed(static_cast<size_t>(std::min(perGroup, inputTiles) * tileDwords));
    float c[4 * kHalfDwords];
    const Tiles tiles(columns);
    for (int64_t g0 = 0; g0 < inputTiles; g0 += perGroup) {
        const int64_t g1 = std::min(inputTiles, g0 + perGroup);
        for (int64_t g = g0; g < g1; ++g)
            packInputs(x, in, g * columns, std::min<int64_t>(columns, rows - g * columns), columns, chunks,
                       packed.data() + (g - g0) * tileDwords);
        for (int64_t o = o0; o < o1; o += 2 * kTileRows) {
            const int64_t outputs0 = std::min<int64_t>(kTileRows, o1 - o);
            const int64_t outputs1 = std::clamp<int64_t>(o1 - o - kTileRows, 0, kTileRows);
            const WeightTile a[2] = {WeightTile(w, in, o, outputs0), WeightTile(w, in, o + kTileRows, outputs1)};
            for (int64_t g = g0; g < g1; g += 2) {
                const int64_t count0 = std::min<int64_t>(columns, rows - g * columns);
                const int64_t count1 = g + 1 < g1 ? std::min<int64_t>(columns, rows - (g + 1) * columns) : 0;
                const uint32_t* b[2] = {packed.data() + (g - g0) * tileDwords,
                                        count1 > 0 ? packed.data() + (g + 1 - g0) * tileDwords : nullptr};
                if (outputs1 > 0 && count1 > 0)
                    multiply<2, 2>(a, b, columns, c);
                else if (outputs1 > 0)
                    multiply<2, 1>(a, b, columns, c);
                else if (count1 > 0)
                    multiply<1, 2>(a, b, columns, c);
                else
                    multiply<1, 1>(a, b, columns, c);
                const int64_t tile = kTileRows * columns;
                // C tiles as multiply stores them: [a][b] at (2a + b) * tile, the (1, 2) form at b.
                float* yAt = y + g * columns * yStride + o;
                storeTransposed(c, columns, outputs0, count0, yAt, yStride);
                if (count1 > 0) storeTransposed(c + tile, columns, outputs0, count1, yAt + columns * yStride, yStride);
                if (outputs1 > 0) {
                    storeTransposed(c + 2 * tile, columns, outputs1, count0, yAt + kTileRows, yStride);
                    if (count1 > 0)
                        storeTransposed(c + 3 * tile, columns, outputs1, count1, yAt + columns * yStride + kTileRows,
                                        yStride);
                }
            }
        }
    }
}

}  // namespace kvscope::kernels::amx
