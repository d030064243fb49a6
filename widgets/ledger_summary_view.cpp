// SPDX-License-Identifier: MIT
#include "widgets/ledger_summary_view.h"

#include "widgets/item_table_model.h"

#include "experiments/report.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace kvscope::widgets {

using experiments::ItemRecord;

QString summaryLine(const std::vector<ItemRecord>& items) {
    const experiments::StudySummary study = experiments::summarizeStudy(items);
    const experiments::MatchedSummary& m = study.matched;
    if (m.n == 0) return QObject::tr("%1 items; no live-vs-prefill comparison (matched) in this run").arg(items.size());
    auto percent = [](double x) { return QStringLiteral("%1%").arg(100 * x, 0, 'f', 1); };
    QString line = QObject::tr("n %1  |  suffixes differ %2 (%3)  |  labels flipped %4")
                       .arg(m.n)
                       .arg(m.suffixDiffer)
                       .arg(percent(static_cast<double>(m.suffixDiffer) / static_cast<double>(m.n)))
                       .arg(m.labelDiffer);
    if (const auto& a = m.accuracy)
        line += QObject::tr("  |  accuracy live %1 / prefill %2, diff %3 pt, paired 95% CI [%4, %5]")
                    .arg(percent(a->live), percent(a->prefill))
                    .arg(100 * a->diff, 0, 'f', 1)
                    .arg(100 * a->bootstrapCi.lower, 0, 'f', 1)
                    .arg(100 * a->bootstrapCi.upper, 0, 'f', 1);
    for (const auto& [precision, row] : study.fixedPrefix)
        if (row.n > 0)
            line += QObject::tr("  |  2x2 %1 disagree %2/%3")
                        .arg(QString::fromStdString(precision))
                        .arg(row.disagree)
                        .arg(row.n);
    return line;
}

LedgerSummaryView::LedgerSummaryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    summary_ = new QLabel(tr("Open a ledger to see what its run found."), this);
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(summary_);
    auto* plots = new QHBoxLayout;
    divergencePlot_ = makePlot(ItemMeasure::FirstDivergence);
    marginPlot_ = makePlot(ItemMeasure::MarginAtDivergence);
    plots->addWidget(divergencePlot_);
    plots->addWidget(marginPlot_);
    layout->addLayout(plots);
}

QCustomPlot* LedgerSummaryView::makePlot(ItemMeasure measure) {
    auto* plot = new QCustomPlot(this);
    plot->setMinimumHeight(130);
    plot->setMaximumHeight(180);
    plot->xAxis->setLabel(measure == ItemMeasure::FirstDivergence ? tr("first divergence (step)")
                                                                  : tr("margin at divergence"));
    plot->setToolTip(measure == ItemMeasure::FirstDivergence
                         ? tr("Continuation step where live and prefill first differ. Click a bar to list its items, "
                              "again to list all.")
                         : tr("Top-1 minus top-2 logit on the live side at the first divergence. Click a bar to list "
                              "its items, again to list all."));
    plot->yAxis->setLabel(tr("items"));
    auto* bars = new QCPBars(plot->xAxis, plot->yAxis);
    bars->setWidthType(QCPBars::wtPlotCoords);
    bars->setSelectable(QCP::stSingleData);
    auto* note = new QCPItemText(plot);  // the empty state, shown instead of bars
    note->position->setType(QCPItemPosition::ptAxisRectRatio);
    note->position->setCoords(0.5, 0.5);
    note->setText(tr("no divergent items"));
    connect(plot, &QCustomPlot::plottableClick, this,
            [this, measure](QCPAbstractPlottable*, int index, QMouseEvent*) { onBarClicked(measure, index); });
    return plot;
}

QCustomPlot* LedgerSummaryView::plot(ItemMeasure measure) const {
    return measure == ItemMeasure::FirstDivergence ? divergencePlot_ : marginPlot_;
}

const std::vector<HistogramBar>& LedgerSummaryView::bars(ItemMeasure measure) const {
    return measure == ItemMeasure::FirstDivergence ? divergenceBars_ : marginBars_;
}

QString LedgerSummaryView::summaryText() const { return summary_->text(); }

void LedgerSummaryView::setItems(const std::vector<ItemRecord>& items) {
    summary_->setText(summaryLine(items));
    divergenceBars_ = histogramOf(items, ItemMeasure::FirstDivergence);
    marginBars_ = histogramOf(items, ItemMeasure::MarginAtDivergence);
    range_ = {};
    showBars(ItemMeasure::FirstDivergence);
    showBars(ItemMeasure::MarginAtDivergence);
}

void LedgerSummaryView::showBars(ItemMeasure measure) {
    QCustomPlot* p = plot(measure);
    auto* graph = static_cast<QCPBars*>(p->plottable(0));
    const std::vector<HistogramBar>& b = bars(measure);
    QVector<double> centres, counts;
    for (const HistogramBar& bar : b) {
        centres << (bar.lower + bar.upper) / 2;
        counts << bar.count;
    }
    graph->setData(centres, counts, true);
    graph->setWidth(b.empty() ? 1 : (b.front().upper - b.front().lower) * 0.9);
    graph->setSelection(QCPDataSelection());
    const bool empty = b.empty();
    // Empty state: no divergent item means no bars; the plot says so instead of showing bare axes.
    p->xAxis->setRange(empty ? QCPRange(0, 1) : QCPRange(b.front().lower, b.back().upper));
    int highest = 1;
    for (const HistogramBar& bar : b) highest = std::max(highest, bar.count);
    p->yAxis->setRange(0, highest * 1.1);
    p->xAxis->setTicks(!empty);
    p->yAxis->setTicks(!empty);
    p->item(0)->setVisible(empty);
    p->replot(QCustomPlot::rpQueuedReplot);
}

void LedgerSummaryView::onBarClicked(ItemMeasure measure, int index) {
    const std::vector<HistogramBar>& b = bars(measure);
    if (index < 0 || index >= static_cast<int>(b.size())) return;
    const HistogramBar& bar = b[static_cast<std::size_t>(index)];
    const bool same = range_.active && range_.measure == measure && range_.lower == bar.lower;
    range_ = same ? ItemRange{} : ItemRange{true, measure, bar.lower, bar.upper};
    highlight();
    emit rangeChanged(range_);
}

void LedgerSummaryView::highlight() {
    for (const ItemMeasure measure : {ItemMeasure::FirstDivergence, ItemMeasure::MarginAtDivergence}) {
        auto* graph = static_cast<QCPBars*>(plot(measure)->plottable(0));
        QCPDataSelection selection;
        if (range_.active && range_.measure == measure) {
            const auto& b = bars(measure);
            for (std::size_t i = 0; i < b.size(); ++i)
                if (b[i].lower == range_.lower)
                    selection.addDataRange(QCPDataRange(static_cast<int>(i), static_cast<int>(i) + 1));
        }
        graph->setSelection(selection);
        plot(measure)->replot(QCustomPlot::rpQueuedReplot);
    }
}

}  // namespace kvscope::widgets
