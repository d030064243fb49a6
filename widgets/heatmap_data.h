// SPDX-License-Identifier: MIT
#pragma once
// The pure maths behind the KV difference heatmap (no Qt, no torch): a CacheDiff reduced to one
// value per (row, position) cell for a chosen metric and K/V component, a display downsampling that
// keeps the maximum of each bucket, and the colour range. Tested without painting.
#include "core/cache/cache_diff.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::widgets {

enum class DiffMetric { MaxAbs, MeanAbs, RelativeL2, DifferingFraction };
enum class KvComponent { Keys, Values, Both };

const char* metricName(DiffMetric metric);      // "max |diff|", ...
const char* componentName(KvComponent component);

// rows x positions values, row-major: value(r, p) = values[r * positions + p].
struct HeatmapGrid {
    int64_t rows = 0, positions = 0;
    std::vector<double> values;
    double value(int64_t row, int64_t position) const {
        return values[static_cast<std::size_t>(row * positions + position)];
    }
    double maxValue() const;
    double minPositive() const;  // smallest value > 0 (the floor of a log scale), 0 when none
};

// Layers x positions. Across heads: max |diff| takes the max, mean |diff| the mean, relative L2 the
// root mean square of the per-head values, the differing fraction counts differing elements over
// heads x head_dim. With Both, K and V are combined the same way (max, mean, RMS, pooled count).
HeatmapGrid layerGrid(const CacheDiff& diff, DiffMetric metric, KvComponent component);
// One cell of layerGrid without computing the grid (hover text).
double layerCell(const CacheDiff& diff, int64_t layer, int64_t position, DiffMetric metric, KvComponent component);
// Heads x positions of one layer (the per-head breakdown).
HeatmapGrid headGrid(const CacheDiff& diff, int64_t layer, DiffMetric metric, KvComponent component);

// At most `maxPositions` display columns; each is the maximum over the positions it covers, so a
// single differing position never disappears from view. `columnStart[c]` is its first position.
struct DisplayGrid {
    HeatmapGrid grid;
    std::vector<int64_t> columnStart;
};
DisplayGrid downsampleForDisplay(const HeatmapGrid& full, int64_t maxPositions);

// CSV with a header row "row,p0,p1,..." and one line per row.
std::string gridCsv(const HeatmapGrid& grid, const std::string& rowLabel);

}  // namespace kvscope::widgets
