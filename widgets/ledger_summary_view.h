// SPDX-License-Identifier: MIT
#pragma once
// Above the item table: what the run found, at a glance. A strip with the study's headline counts
// (suffixes differ, labels flipped, fp32, the paired CI of the accuracy difference) from the same
// report `kvscope report` prints, and two histograms over the divergent items - the generated step
// where live and prefill first differ, and the live side's top-1/top-2 margin there. Clicking a bar
// asks the item table to show only that bar's items; clicking it again clears the filter.
#include "widgets/item_table_model.h"

#include <QWidget>

#include <vector>

class QCustomPlot;
class QCPAbstractPlottable;
class QCPBars;
class QLabel;

namespace kvscope::widgets {

using experiments::HistogramBar;
// "n 200 | suffixes differ 57 (28.5%) | labels flipped 3 | accuracy live 70.5% / prefill 71.0%, ..."
QString summaryLine(const std::vector<experiments::ItemRecord>& items);

class LedgerSummaryView : public QWidget {
    Q_OBJECT
public:
    explicit LedgerSummaryView(QWidget* parent = nullptr);
    void setItems(const std::vector<experiments::ItemRecord>& items);

    const ItemRange& range() const { return range_; }
    QString summaryText() const;
    QCustomPlot* plot(ItemMeasure measure) const;
    const std::vector<HistogramBar>& bars(ItemMeasure measure) const;

signals:
    void rangeChanged(const kvscope::widgets::ItemRange& range);

private:
    QCustomPlot* makePlot(ItemMeasure measure);
    void showBars(ItemMeasure measure);
    void onBarClicked(ItemMeasure measure, int bar);
    void highlight();

    QLabel* summary_ = nullptr;
    QCustomPlot *divergencePlot_ = nullptr, *marginPlot_ = nullptr;
    std::vector<HistogramBar> divergenceBars_, marginBars_;
    ItemRange range_;
};

}  // namespace kvscope::widgets
