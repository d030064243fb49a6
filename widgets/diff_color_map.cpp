// SPDX-License-Identifier: MIT
#include "widgets/diff_color_map.h"

#include <QToolTip>

#include <cmath>

namespace kvscope::widgets {

DiffColorMap::DiffColorMap(QWidget* parent) : QCustomPlot(parent) {
    map_ = new QCPColorMap(xAxis, yAxis);
    map_->setInterpolate(false);
    scale_ = new QCPColorScale(this);
    plotLayout()->addElement(0, 1, scale_);
    scale_->setType(QCPAxis::atRight);
    map_->setColorScale(scale_);
    map_->setGradient(QCPColorGradient::gpHot);
    auto* margins = new QCPMarginGroup(this);
    axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    scale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    xAxis->setLabel(tr("position"));
    setMinimumSize(320, 200);
    emptyText_ = new QCPItemText(this);
    emptyText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyText_->position->setCoords(0.5, 0.5);
    emptyText_->setPositionAlignment(Qt::AlignCenter);
    emptyText_->setText(tr("Nothing to show yet."));
    setGrid({}, {}, {}, false);
    connect(this, &QCustomPlot::mouseMove, this, &DiffColorMap::onMouseMove);
    connect(this, &QCustomPlot::mousePress, this, &DiffColorMap::onMousePress);
}

void DiffColorMap::setGrid(HeatmapGrid grid, const QString& rowLabel, const QString& valueLabel, bool logScale,
                           int64_t maxDisplayColumns) {
    grid_ = std::move(grid);
    rowLabel_ = rowLabel;
    valueLabel_ = valueLabel;
    display_ = downsampleForDisplay(grid_, maxDisplayColumns);
    const auto columns = static_cast<int>(display_.grid.positions), rows = static_cast<int>(grid_.rows);
    const double floor = grid_.minPositive() > 0 ? grid_.minPositive() : 1e-12;
    // Key axis in real positions, so the mouse maps to an exact position whatever the downsampling.
    map_->data()->setSize(std::max(columns, 1), std::max(rows, 1));
    map_->data()->setRange(QCPRange(0, static_cast<double>(std::max<int64_t>(grid_.positions - 1, 1))),
                           QCPRange(0, std::max(rows - 1, 1)));
    for (int c = 0; c < columns; ++c)
        for (int r = 0; r < rows; ++r) {
            const double v = display_.grid.value(r, c);
            map_->data()->setCell(c, r, logScale ? std::max(v, floor / 2) : v);
        }
    scale_->setDataScaleType(logScale ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (logScale)
        scale_->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    else
        scale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    const double top = std::max(grid_.maxValue(), logScale ? floor : 1e-30);
    map_->setDataRange(logScale ? QCPRange(floor / 2, top) : QCPRange(0, top));
    scale_->axis()->setLabel(valueLabel);
    yAxis->setLabel(rowLabel);
    // Rows are whole layers or heads: integer ticks, thinned out for deep models.
    QSharedPointer<QCPAxisTickerFixed> rowTicker(new QCPAxisTickerFixed);
    rowTicker->setTickStep(1.0);
    rowTicker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    yAxis->setTicker(rowTicker);
    rescaleAxes();
    const bool empty = grid_.rows == 0 || grid_.positions == 0;
    for (QCPAxis* axis : {xAxis, yAxis}) axis->setVisible(!empty);
    map_->setVisible(!empty);
    scale_->setVisible(!empty);
    emptyText_->setVisible(empty);
    replot(rpQueuedReplot);
}

void DiffColorMap::setEmptyText(const QString& text) {
    emptyText_->setText(text);
    replot(rpQueuedReplot);
}

std::optional<DiffColorMap::Cell> DiffColorMap::cellAtPixel(const QPoint& pixel) const {
    if (grid_.rows == 0 || grid_.positions == 0 || !axisRect()->rect().contains(pixel)) return std::nullopt;
    const auto position = static_cast<int64_t>(std::lround(xAxis->pixelToCoord(pixel.x())));
    const auto row = static_cast<int64_t>(std::lround(yAxis->pixelToCoord(pixel.y())));
    if (position < 0 || position >= grid_.positions || row < 0 || row >= grid_.rows) return std::nullopt;
    return Cell{row, position, grid_.value(row, position)};
}

QString DiffColorMap::describeCell(const Cell& c) const {
    if (describe_) return describe_(c);
    return tr("%1 %2, position %3: %4 = %5")
        .arg(rowLabel_)
        .arg(c.row)
        .arg(c.position)
        .arg(valueLabel_)
        .arg(c.value, 0, 'g', 6);
}

void DiffColorMap::onMouseMove(QMouseEvent* event) {
    if (const auto cell = cellAtPixel(event->pos()))
        QToolTip::showText(event->globalPosition().toPoint(), describeCell(*cell), this);
    else
        QToolTip::hideText();
}

void DiffColorMap::onMousePress(QMouseEvent* event) {
    if (const auto cell = cellAtPixel(event->pos())) emit cellClicked(cell->row, cell->position);
}

}  // namespace kvscope::widgets
