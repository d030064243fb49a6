// SPDX-License-Identifier: MIT
#pragma once
// A QCustomPlot showing one HeatmapGrid (rows x positions) as a colour map without interpolation,
// with a colour bar, linear or log scale, and exact values under the mouse: the picture may be
// downsampled for display (max per column bucket), the numbers never are.
#include "widgets/heatmap_data.h"

#include <qcustomplot.h>

#include <functional>
#include <optional>

namespace kvscope::widgets {

class DiffColorMap : public QCustomPlot {
    Q_OBJECT
public:
    explicit DiffColorMap(QWidget* parent = nullptr);
    // rowLabel: "layer" or "head". maxDisplayColumns bounds the drawn columns, never the data.
    void setGrid(HeatmapGrid grid, const QString& rowLabel, const QString& valueLabel, bool logScale,
                 int64_t maxDisplayColumns = 2048);
    const HeatmapGrid& grid() const { return grid_; }
    const DisplayGrid& displayed() const { return display_; }
    // With nothing to draw (no rows or no positions) the plot shows this sentence instead of an
    // empty map with made-up axes.
    void setEmptyText(const QString& text);
    bool showsEmptyState() const { return emptyText_->visible(); }
    QString emptyText() const { return emptyText_->text(); }

    struct Cell {
        int64_t row = 0, position = 0;
        double value = 0;
    };
    std::optional<Cell> cellAtPixel(const QPoint& pixel) const;
    QString describeCell(const Cell& cell) const;  // the hover text
    // Replaces the hover text (the heatmap lists every metric of the cell, not just the one drawn).
    void setCellDescriber(std::function<QString(const Cell&)> describe) { describe_ = std::move(describe); }

signals:
    void cellClicked(int64_t row, int64_t position);

private:
    void onMouseMove(QMouseEvent* event);
    void onMousePress(QMouseEvent* event);

    QCPColorMap* map_ = nullptr;
    QCPColorScale* scale_ = nullptr;
    QCPItemText* emptyText_ = nullptr;
    HeatmapGrid grid_;
    DisplayGrid display_;
    QString rowLabel_, valueLabel_;
    std::function<QString(const Cell&)> describe_;
};

}  // namespace kvscope::widgets
