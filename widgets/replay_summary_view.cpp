// SPDX-License-Identifier: MIT
#include "widgets/replay_summary_view.h"

#include "widgets/mismatch_strip.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>

namespace kvscope::widgets {

using experiments::DeltaBasis;
using experiments::ItemRecord;

QString replaySummaryLine(const std::vector<ItemRecord>& items, const DeltaBasis& basis) {
    int64_t tokens = 0, withMismatch = 0, replayed = 0, compared = 0;
    double sum = 0, max = 0;
    for (const ItemRecord& item : items) {
        const experiments::ItemMismatch m = experiments::itemMismatch(item, basis);
        if (const std::optional<std::vector<int64_t>>& output = item.trajectories.output)
            tokens += static_cast<int64_t>(output->size());
        replayed += m.replayed;
        withMismatch += m.firstArgmaxMismatch.has_value();
        for (const std::optional<double>& d : experiments::absDeltas(item, basis))
            if (d) {
                sum += *d;
                max = std::max(max, *d);
                ++compared;
            }
    }
    QString line = QObject::tr("%1 trajectories, %2 output tokens").arg(items.size()).arg(tokens);
    if (basis.label.empty()) return line + QObject::tr("  |  no replay yet: run kvscope replay");
    line += QObject::tr("  |  %1: %2 replayed, the engine's token not the replay's argmax somewhere in %3")
                .arg(QString::fromStdString(basis.name()))
                .arg(replayed)
                .arg(withMismatch);
    if (compared == 0) return line + QObject::tr("  |  no logprobs to compare (the engine gave none)");
    return line + QObject::tr("  |  mean |delta| %1, max %2 over %3 tokens")
                      .arg(sum / static_cast<double>(compared), 0, 'g', 4)
                      .arg(max, 0, 'g', 4)
                      .arg(compared);
}

ReplaySummaryView::ReplaySummaryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* row = new QHBoxLayout;
    replay_ = new QComboBox(this);
    replay_->setToolTip(tr("The replay whose logprobs are compared (reference/kernels/precision)"));
    against_ = new QComboBox(this);
    against_->setToolTip(tr("What it is compared with: the engine's own logprobs, or another replay"));
    row->addWidget(new QLabel(tr("Replay"), this));
    row->addWidget(replay_);
    row->addWidget(new QLabel(tr("against"), this));
    row->addWidget(against_);
    row->addStretch(1);
    layout->addLayout(row);
    summary_ = new QLabel(this);
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(summary_);
    plot_ = new QCustomPlot(this);
    setupPlot();
    layout->addWidget(plot_);
    connect(replay_, &QComboBox::currentIndexChanged, this, [this] {
        if (filling_) return;
        fillAgainst();
        onChoice();
    });
    connect(against_, &QComboBox::currentIndexChanged, this, [this] {
        if (!filling_) onChoice();
    });
}

void ReplaySummaryView::setupPlot() {
    plot_->setMinimumHeight(130);
    plot_->setMaximumHeight(180);
    plot_->xAxis->setLabel(tr("|delta logprob| per token (bins start at the value shown)"));
    plot_->yAxis->setLabel(tr("tokens"));
    plot_->setToolTip(
        tr("Every replayed token of the run by |delta logprob| on the chosen basis, a decade a bar; "
           "the tokens and the mismatch strip use the same colours"));
}

void ReplaySummaryView::setItems(const std::vector<ItemRecord>& items) {
    items_ = items;
    const std::vector<std::string> labels = experiments::replayLabels(items_);
    const QString kept = QString::fromStdString(basis_.label);
    filling_ = true;
    replay_->clear();
    for (const std::string& label : labels) replay_->addItem(QString::fromStdString(label));
    replay_->setCurrentIndex(std::max(0, replay_->findText(kept)));
    fillAgainst();
    filling_ = false;
    onChoice();
}

void ReplaySummaryView::fillAgainst() {
    const bool outer = filling_;
    filling_ = true;
    const QString kept = against_->currentData().toString();
    against_->clear();
    against_->addItem(tr("engine"), QString());
    for (int i = 0; i < replay_->count(); ++i)
        if (i != replay_->currentIndex()) against_->addItem(replay_->itemText(i), replay_->itemText(i));
    against_->setCurrentIndex(std::max(0, against_->findData(kept)));
    filling_ = outer;
}

void ReplaySummaryView::setBasis(const DeltaBasis& basis) {
    const int replay = replay_->findText(QString::fromStdString(basis.label));
    if (replay < 0) return;
    filling_ = true;
    replay_->setCurrentIndex(replay);
    fillAgainst();
    against_->setCurrentIndex(std::max(0, against_->findData(QString::fromStdString(basis.against))));
    filling_ = false;
    onChoice();
}

void ReplaySummaryView::onChoice() {
    basis_ = DeltaBasis{replay_->currentText().toStdString(), against_->currentData().toString().toStdString()};
    showBasis();
    emit basisChanged(basis_);
}

QString ReplaySummaryView::summaryText() const { return summary_->text(); }

void ReplaySummaryView::showBasis() {
    summary_->setText(replaySummaryLine(items_, basis_));
    bins_ =
        basis_.label.empty() ? std::vector<experiments::DeltaBin>() : experiments::absDeltaHistogram(items_, basis_);
    plot_->clearPlottables();
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    int64_t highest = 1;
    for (std::size_t i = 0; i < bins_.size(); ++i) {
        // A bar each, so each takes its bin's colour: the histogram is the colour key of the strip.
        auto* bar = new QCPBars(plot_->xAxis, plot_->yAxis);
        bar->setWidth(0.8);
        bar->addData(static_cast<double>(i), static_cast<double>(bins_[i].tokens));
        bar->setBrush(deltaBinColor(i));
        bar->setPen(QPen(deltaBinColor(i).darker(140)));
        ticker->addTick(static_cast<double>(i), QString::fromStdString(bins_[i].name));
        highest = std::max(highest, bins_[i].tokens);
    }
    plot_->xAxis->setTicker(ticker);
    plot_->xAxis->setRange(-0.6, std::max<double>(1, static_cast<double>(bins_.size())) - 0.4);
    plot_->yAxis->setRange(0, static_cast<double>(highest) * 1.1);
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::widgets
