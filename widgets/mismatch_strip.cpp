// SPDX-License-Identifier: MIT
#include "widgets/mismatch_strip.h"

#include "experiments/replay_inspection.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::widgets {

namespace {
constexpr int kMarkHeight = 5;  // the triangle above the first argmax mismatch

QColor mix(const QColor& a, const QColor& b, double t) {
    return QColor::fromRgbF(static_cast<float>(a.redF() + (b.redF() - a.redF()) * t),
                            static_cast<float>(a.greenF() + (b.greenF() - a.greenF()) * t),
                            static_cast<float>(a.blueF() + (b.blueF() - a.blueF()) * t));
}
}  // namespace

QColor deltaBinColor(std::size_t bin) {
    if (bin == 0) return {0x9f, 0xd8, 0xa8};  // exactly equal
    const QColor pale(0xff, 0xf2, 0xb0), orange(0xff, 0x99, 0x33), dark(0xb0, 0x00, 0x00);
    const std::size_t last = experiments::deltaBinOf(std::numeric_limits<double>::infinity());
    const double t = static_cast<double>(bin - 1) / static_cast<double>(std::max<std::size_t>(last - 1, 1));
    return t < 0.5 ? mix(pale, orange, t * 2) : mix(orange, dark, (t - 0.5) * 2);
}

QColor deltaColor(std::optional<double> absDelta) {
    return absDelta ? deltaBinColor(experiments::deltaBinOf(*absDelta)) : QColor(0xd8, 0xd8, 0xd8);
}

MismatchStrip::MismatchStrip(QWidget* parent) : QWidget(parent) {
    setMouseTracking(true);
    setCursor(Qt::PointingHandCursor);
    setToolTip(
        tr("|delta logprob| per output token. Hover for the numbers, click to locate where the "
           "references part at that step."));
}

void MismatchStrip::setDeltas(std::vector<std::optional<double>> deltas, int marked,
                              std::function<QString(int)> describe) {
    deltas_ = std::move(deltas);
    marked_ = marked;
    selected_ = -1;
    describe_ = std::move(describe);
    update();
}

void MismatchStrip::setSelectedStep(int step) {
    selected_ = step;
    update();
}

QSize MismatchStrip::sizeHint() const { return {400, 28}; }
QSize MismatchStrip::minimumSizeHint() const { return {60, 20}; }

QRect MismatchStrip::cellRect(int step) const {
    if (step < 0 || step >= static_cast<int>(deltas_.size())) return {};
    const double width = static_cast<double>(this->width()) / static_cast<double>(deltas_.size());
    const int left = static_cast<int>(std::floor(step * width));
    const int right = static_cast<int>(std::floor((step + 1) * width));
    return {left, kMarkHeight, std::max(1, right - left), height() - kMarkHeight};
}

int MismatchStrip::stepAt(const QPoint& pos) const {
    if (deltas_.empty() || pos.x() < 0 || pos.x() >= width() || pos.y() < 0 || pos.y() >= height()) return -1;
    const auto step = static_cast<int>(pos.x() * static_cast<double>(deltas_.size()) / width());
    return std::clamp(step, 0, static_cast<int>(deltas_.size()) - 1);
}

QString MismatchStrip::tooltipFor(int step) const {
    if (step < 0 || step >= static_cast<int>(deltas_.size()) || !describe_) return {};
    return describe_(step);
}

void MismatchStrip::paintEvent(QPaintEvent*) {
    QPainter p(this);
    if (deltas_.empty()) {
        p.setPen(palette().color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("no replayed tokens"));
        return;
    }
    for (int step = 0; step < static_cast<int>(deltas_.size()); ++step)
        p.fillRect(cellRect(step), deltaColor(deltas_[static_cast<std::size_t>(step)]));
    if (marked_ >= 0) {  // a triangle pointing down at the first argmax mismatch
        const QRect cell = cellRect(marked_);
        const int mid = cell.center().x();
        const QPoint tip[3] = {{mid - 4, 0}, {mid + 4, 0}, {mid, kMarkHeight}};
        p.setPen(Qt::NoPen);
        p.setBrush(palette().color(QPalette::WindowText));
        p.drawPolygon(tip, 3);
    }
    if (selected_ >= 0) {
        p.setPen(QPen(palette().color(QPalette::Highlight), 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(cellRect(selected_).adjusted(1, 1, -1, -1));
    }
}

void MismatchStrip::mousePressEvent(QMouseEvent* event) {
    const int step = stepAt(event->position().toPoint());
    if (event->button() == Qt::LeftButton && step >= 0) emit stepClicked(step);
}

bool MismatchStrip::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = tooltipFor(stepAt(help->pos()));
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    return QWidget::event(event);
}

}  // namespace kvscope::widgets
