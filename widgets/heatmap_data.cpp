// SPDX-License-Identifier: MIT
#include "widgets/heatmap_data.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvscope::widgets {
namespace {

// One cell's value from the per-head grids of one component, over `heads` heads.
struct Accumulator {
    DiffMetric metric;
    double acc = 0;
    int64_t n = 0;
    void add(const DiffGrid& g, std::size_t i) {
        switch (metric) {
        case DiffMetric::MaxAbs: acc = std::max(acc, static_cast<double>(g.maxAbs[i])); break;
        case DiffMetric::MeanAbs: acc += g.meanAbs[i]; break;
        case DiffMetric::RelativeL2: acc += static_cast<double>(g.relL2[i]) * g.relL2[i]; break;
        case DiffMetric::DifferingFraction: acc += g.differing[i]; break;
        }
        ++n;
    }
    double result(int64_t headDim) const {
        if (n == 0) return 0;
        switch (metric) {
        case DiffMetric::MaxAbs: return acc;
        case DiffMetric::MeanAbs: return acc / static_cast<double>(n);
        case DiffMetric::RelativeL2: return std::sqrt(acc / static_cast<double>(n));
        case DiffMetric::DifferingFraction: return acc / static_cast<double>(n * headDim);
        }
        return 0;
    }
};

double cell(const CacheDiff& d, int64_t layer, int64_t headBegin, int64_t headEnd, int64_t position, DiffMetric metric,
            KvComponent component) {
    Accumulator a{metric};
    for (int64_t h = headBegin; h < headEnd; ++h) {
        const std::size_t i = d.at(layer, h, position);
        if (component != KvComponent::Values) a.add(d.keys, i);
        if (component != KvComponent::Keys) a.add(d.values, i);
    }
    return a.result(d.headDim);
}

}  // namespace

const char* metricName(DiffMetric m) {
    switch (m) {
    case DiffMetric::MaxAbs: return "max |diff|";
    case DiffMetric::MeanAbs: return "mean |diff|";
    case DiffMetric::RelativeL2: return "relative L2";
    case DiffMetric::DifferingFraction: return "differing fraction";
    }
    return "?";
}

const char* componentName(KvComponent c) {
    switch (c) {
    case KvComponent::Keys: return "K";
    case KvComponent::Values: return "V";
    case KvComponent::Both: return "K+V";
    }
    return "?";
}

double HeatmapGrid::maxValue() const { return values.empty() ? 0.0 : *std::max_element(values.begin(), values.end()); }

double HeatmapGrid::minPositive() const {
    double m = 0;
    for (double v : values)
        if (v > 0 && (m == 0 || v < m)) m = v;
    return m;
}

HeatmapGrid layerGrid(const CacheDiff& d, DiffMetric metric, KvComponent component) {
    HeatmapGrid g{d.layers, d.positions, std::vector<double>(static_cast<std::size_t>(d.layers * d.positions))};
    for (int64_t l = 0; l < d.layers; ++l)
        for (int64_t p = 0; p < d.positions; ++p)
            g.values[static_cast<std::size_t>(l * d.positions + p)] = cell(d, l, 0, d.heads, p, metric, component);
    return g;
}

double layerCell(const CacheDiff& d, int64_t layer, int64_t position, DiffMetric metric, KvComponent component) {
    return cell(d, layer, 0, d.heads, position, metric, component);
}

HeatmapGrid headGrid(const CacheDiff& d, int64_t layer, DiffMetric metric, KvComponent component) {
    HeatmapGrid g{d.heads, d.positions, std::vector<double>(static_cast<std::size_t>(d.heads * d.positions))};
    for (int64_t h = 0; h < d.heads; ++h)
        for (int64_t p = 0; p < d.positions; ++p)
            g.values[static_cast<std::size_t>(h * d.positions + p)] = cell(d, layer, h, h + 1, p, metric, component);
    return g;
}

DisplayGrid downsampleForDisplay(const HeatmapGrid& full, int64_t maxPositions) {
    DisplayGrid out;
    const int64_t columns = std::max<int64_t>(1, std::min(full.positions, maxPositions));
    out.grid = {full.rows, columns, std::vector<double>(static_cast<std::size_t>(full.rows * columns), 0.0)};
    for (int64_t c = 0; c < columns; ++c) out.columnStart.push_back(c * full.positions / columns);
    for (int64_t r = 0; r < full.rows; ++r)
        for (int64_t c = 0; c < columns; ++c) {
            const int64_t end = c + 1 < columns ? out.columnStart[static_cast<std::size_t>(c + 1)] : full.positions;
            double m = 0;
            for (int64_t p = out.columnStart[static_cast<std::size_t>(c)]; p < end; ++p)
                m = std::max(m, full.value(r, p));
            out.grid.values[static_cast<std::size_t>(r * columns + c)] = m;
        }
    return out;
}

std::string gridCsv(const HeatmapGrid& g, const std::string& rowLabel) {
    std::ostringstream out;
    out.precision(9);
    out << rowLabel;
    for (int64_t p = 0; p < g.positions; ++p) out << ",p" << p;
    out << '\n';
    for (int64_t r = 0; r < g.rows; ++r) {
        out << r;
        for (int64_t p = 0; p < g.positions; ++p) out << ',' << g.value(r, p);
        out << '\n';
    }
    return out.str();
}

}  // namespace kvscope::widgets
