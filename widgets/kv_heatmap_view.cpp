// SPDX-License-Identifier: MIT
#include "widgets/kv_heatmap_view.h"

#include "widgets/diff_color_map.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace kvscope::widgets {

KvHeatmapView::KvHeatmapView(QWidget* parent) : QWidget(parent) { setupControls(); }

void KvHeatmapView::setupControls() {
    auto* layout = new QVBoxLayout(this);
    auto* controls = new QHBoxLayout;
    metricBox_ = new QComboBox(this);
    for (DiffMetric m :
         {DiffMetric::MaxAbs, DiffMetric::MeanAbs, DiffMetric::RelativeL2, DiffMetric::DifferingFraction})
        metricBox_->addItem(QString::fromLatin1(metricName(m)), static_cast<int>(m));
    componentBox_ = new QComboBox(this);
    for (KvComponent c : {KvComponent::Both, KvComponent::Keys, KvComponent::Values})
        componentBox_->addItem(QString::fromLatin1(componentName(c)), static_cast<int>(c));
    logBox_ = new QCheckBox(tr("log scale"), this);
    auto* exportButton = new QPushButton(tr("Export\u2026"), this);
    controls->addWidget(new QLabel(tr("Metric"), this));
    controls->addWidget(metricBox_);
    controls->addWidget(new QLabel(tr("Cache"), this));
    controls->addWidget(componentBox_);
    controls->addWidget(logBox_);
    controls->addStretch(1);
    controls->addWidget(exportButton);
    layout->addLayout(controls);
    summary_ = new QLabel(this);
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    map_ = new DiffColorMap(this);
    map_->setEmptyText(
        tr("No comparison yet: select an item of a ledger, or run a session, to see where its caches differ."));
    layout->addWidget(map_, 1);

    map_->setCellDescriber([this](const DiffColorMap::Cell& c) { return describeCell(c.row, c.position); });
    connect(metricBox_, &QComboBox::currentIndexChanged, this, &KvHeatmapView::refresh);
    connect(componentBox_, &QComboBox::currentIndexChanged, this, &KvHeatmapView::refresh);
    connect(logBox_, &QCheckBox::toggled, this, &KvHeatmapView::refresh);
    connect(map_, &DiffColorMap::cellClicked, this, [this](int64_t layer, int64_t) { openHeadBreakdown(layer); });
    connect(exportButton, &QPushButton::clicked, this, &KvHeatmapView::exportWithDialog);
}

void KvHeatmapView::exportWithDialog() {
    const QString name = title_.isEmpty() ? QStringLiteral("kv-difference") : title_;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export heatmap"), name + QStringLiteral(".png"),
                                                      tr("PNG image (*.png);;PDF (*.pdf);;CSV numbers (*.csv)"));
    if (!path.isEmpty() && !exportTo(path)) emit exportFailed(tr("Could not write %1").arg(path));
}

DiffMetric KvHeatmapView::metric() const { return static_cast<DiffMetric>(metricBox_->currentData().toInt()); }
KvComponent KvHeatmapView::component() const { return static_cast<KvComponent>(componentBox_->currentData().toInt()); }
void KvHeatmapView::setMetric(DiffMetric m) { metricBox_->setCurrentIndex(metricBox_->findData(static_cast<int>(m))); }
void KvHeatmapView::setComponent(KvComponent c) {
    componentBox_->setCurrentIndex(componentBox_->findData(static_cast<int>(c)));
}
void KvHeatmapView::setLogScale(bool on) { logBox_->setChecked(on); }

void KvHeatmapView::setDiff(const CacheDiff& diff, const QString& title) {
    diff_ = diff;
    title_ = title;
    refresh();
}

void KvHeatmapView::clear() { setDiff({}, {}); }

void KvHeatmapView::refresh() {
    const QString valueLabel = QString::fromLatin1(metricName(metric()));
    map_->setGrid(layerGrid(diff_, metric(), component()), tr("layer"), valueLabel, logBox_->isChecked());
    if (diff_.layers == 0) {
        summary_->setText(tr("No comparison yet."));
        return;
    }
    int layersDiffering = 0;
    for (const LayerDiff& l : diff_.perLayer) layersDiffering += l.bitExact ? 0 : 1;
    summary_->setText(
        diff_.bitExact
            ? tr("%1: the caches are bit-identical (%2 layers x %3 positions).")
                  .arg(title_)
                  .arg(diff_.layers)
                  .arg(diff_.positions)
            : tr("%1: %2 of %3 layers differ; first difference at layer %4, position %5. Click a cell for its heads.")
                  .arg(title_)
                  .arg(layersDiffering)
                  .arg(diff_.layers)
                  .arg(diff_.firstDifference->first)
                  .arg(diff_.firstDifference->second));
}

QString KvHeatmapView::describeCell(int64_t layer, int64_t position) const {
    // Every metric for K and V at full resolution, whatever the picture shows.
    QString text =
        tr("<b>layer %1, position %2</b><table><tr><th></th><th>K</th><th>V</th></tr>").arg(layer).arg(position);
    for (DiffMetric m :
         {DiffMetric::MaxAbs, DiffMetric::MeanAbs, DiffMetric::RelativeL2, DiffMetric::DifferingFraction}) {
        const double k = layerCell(diff_, layer, position, m, KvComponent::Keys);
        const double v = layerCell(diff_, layer, position, m, KvComponent::Values);
        text += QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td></tr>")
                    .arg(QString::fromLatin1(metricName(m)))
                    .arg(k, 0, 'g', 5)
                    .arg(v, 0, 'g', 5);
    }
    return text + QStringLiteral("</table>");
}

QWidget* KvHeatmapView::openHeadBreakdown(int64_t layer) {
    if (layer < 0 || layer >= diff_.layers) return nullptr;
    auto* dialog = new QDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setWindowTitle(
        tr("%1 - layer %2: KV heads x positions (%3 of %4)")
            .arg(title_)
            .arg(layer)
            .arg(QString::fromLatin1(metricName(metric())), QString::fromLatin1(componentName(component()))));
    auto* layout = new QVBoxLayout(dialog);
    auto* heads = new DiffColorMap(dialog);
    heads->setObjectName(QStringLiteral("headBreakdown"));
    heads->setGrid(headGrid(diff_, layer, metric(), component()), tr("KV head"),
                   QString::fromLatin1(metricName(metric())), logBox_->isChecked());
    layout->addWidget(heads);
    dialog->resize(700, 300);
    dialog->show();
    return dialog;
}

bool KvHeatmapView::exportTo(const QString& path) {
    if (path.endsWith(QStringLiteral(".png"), Qt::CaseInsensitive)) return map_->savePng(path);
    if (path.endsWith(QStringLiteral(".pdf"), Qt::CaseInsensitive)) return map_->savePdf(path);
    if (path.endsWith(QStringLiteral(".csv"), Qt::CaseInsensitive)) {
        QFile f(path);
        if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
        const std::string csv = gridCsv(map_->grid(), "layer");
        return f.write(csv.data(), static_cast<qint64>(csv.size())) == static_cast<qint64>(csv.size());
    }
    return false;
}

}  // namespace kvscope::widgets
