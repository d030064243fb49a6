// SPDX-License-Identifier: MIT
#pragma once
// The KV difference heatmap: layers x positions of the live vs prefill cache difference, with the
// metric, K / V / both and linear or log scale selectable; clicking a cell opens that layer's
// heads x positions breakdown. Exports PNG, PDF and CSV (the full-resolution numbers).
#include "widgets/heatmap_data.h"

#include <QWidget>

class QComboBox;
class QCheckBox;
class QLabel;

namespace kvscope::widgets {

class DiffColorMap;

class KvHeatmapView : public QWidget {
    Q_OBJECT
public:
    explicit KvHeatmapView(QWidget* parent = nullptr);
    void setDiff(const CacheDiff& diff, const QString& title);
    void clear();

    DiffMetric metric() const;
    KvComponent component() const;
    void setMetric(DiffMetric metric);
    void setComponent(KvComponent component);
    void setLogScale(bool on);
    DiffColorMap* map() const { return map_; }
    const QString& title() const { return title_; }  // what the shown comparison is, e.g. "item 7: live vs prefill"
    const CacheDiff& diff() const { return diff_; }

    QString describeCell(int64_t layer, int64_t position) const;  // the hover text
    // Returns the dialog it opened (owned by this view), for tests.
    QWidget* openHeadBreakdown(int64_t layer);
    bool exportTo(const QString& path);  // .png, .pdf or .csv by extension

public slots:
    void exportWithDialog();  // asks for a file; exportFailed says when it cannot be written

signals:
    void exportFailed(const QString& message);

private:
    void setupControls();
    void refresh();

    QComboBox *metricBox_ = nullptr, *componentBox_ = nullptr;
    QCheckBox* logBox_ = nullptr;
    QLabel* summary_ = nullptr;
    DiffColorMap* map_ = nullptr;
    CacheDiff diff_;
    QString title_;
};

}  // namespace kvscope::widgets
