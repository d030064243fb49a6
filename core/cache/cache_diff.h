// SPDX-License-Identifier: MIT
#pragma once
// Element-wise comparison of two caches of the same model and length, as plain values (no torch
// types), so a widget or a report can consume it directly.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

class KvCache;

// One metric grid for K or for V, flattened [layer][head][position] (index with at()).
struct DiffGrid {
    std::vector<float> maxAbs;       // max |a-b| over head_dim
    std::vector<float> meanAbs;      // mean |a-b|
    std::vector<float> relL2;        // ||a-b|| / ||a|| over head_dim (0 when both are zero)
    std::vector<int32_t> differing;  // elements whose bits differ
};

struct KvMetrics {
    double maxAbs = 0, meanAbs = 0, relL2 = 0;
    int64_t differing = 0;
};

struct LayerDiff {
    int64_t layer = 0;
    KvMetrics keys, values;
    bool bitExact = true;
};

struct PositionDiff {
    int64_t position = 0;
    double maxAbs = 0;             // over layers, heads, K and V
    int64_t differing = 0;         // differing elements over layers, heads, K and V
    int64_t layersDiffering = 0;
};

struct CacheDiff {
    int64_t layers = 0, heads = 0, positions = 0, headDim = 0;
    DiffGrid keys, values;
    std::vector<LayerDiff> perLayer;
    std::vector<PositionDiff> perPosition;
    bool bitExact = true;
    // The first difference in forward order: the lowest layer that differs anywhere, and within it
    // the lowest position. Empty when bit-exact.
    std::optional<std::pair<int64_t, int64_t>> firstDifference;  // (layer, position)
    double seconds = 0;

    std::size_t at(int64_t layer, int64_t head, int64_t position) const {
        return static_cast<std::size_t>((layer * heads + head) * positions + position);
    }
};

// Refuses (UsageError) caches of different shape or dtype. Different token ids are allowed only
// with allowDifferentIds (the comparison is then of positions, not of tokens).
CacheDiff diffCaches(const KvCache& a, const KvCache& b, bool allowDifferentIds = false);

}  // namespace kvscope
