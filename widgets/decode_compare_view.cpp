// SPDX-License-Identifier: MIT
#include "widgets/decode_compare_view.h"

#include "widgets/token_pane.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QVBoxLayout>

namespace kvscope::widgets {

DecodeCompareView::DecodeCompareView(QWidget* parent) : QWidget(parent) {
    setupPanes();
    setupPlot();
    syncScrolling();
}

void DecodeCompareView::setupPanes() {
    auto* layout = new QVBoxLayout(this);
    summary_ = new QLabel(tr("Select an item in the ledger, or compare in the session."), this);
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    layout->addWidget(setupSideSelector());
    auto* splitter = new QSplitter(Qt::Vertical, this);
    auto* panes = new QSplitter(Qt::Horizontal, splitter);
    live_ = new TokenPane(panes);
    prefill_ = new TokenPane(panes);
    transplant_ = new TokenPane(panes);
    transplant_->hide();
    plot_ = new QCustomPlot(splitter);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    layout->addWidget(splitter, 1);
}

QWidget* DecodeCompareView::setupSideSelector() {
    auto* bar = new QWidget(this);
    auto* row = new QHBoxLayout(bar);
    row->setContentsMargins(0, 0, 0, 0);
    auto constructionBox = [bar](const QString& initial) {
        auto* box = new QComboBox(bar);
        box->setEditable(true);  // chunked:N and incremental:K take any N, K
        box->addItems({QStringLiteral("live"), QStringLiteral("prefill"), QStringLiteral("incremental"),
                       QStringLiteral("incremental:0"), QStringLiteral("chunked:16")});
        box->setCurrentText(initial);
        return box;
    };
    auto dtypeBox = [this, bar] {
        auto* box = new QComboBox(bar);
        box->addItem(tr("run's precision"), QString());
        box->addItem(QStringLiteral("bf16"), QStringLiteral("bf16"));
        box->addItem(QStringLiteral("fp32"), QStringLiteral("fp32"));
        return box;
    };
    auto kernelsBox = [this, bar] {
        auto* box = new QComboBox(bar);
        box->addItem(tr("run's kernels"), QString());
        box->addItem(tr("torch kernels"), QStringLiteral("torch"));
        box->addItem(tr("invariant kernels"), QStringLiteral("invariant"));
        box->addItem(tr("invariant kernels, tile order"), QStringLiteral("invariant-tiles"));
        box->setToolTip(
            tr("invariant: kvscope's batch-invariant CPU kernels, where a prefill gives the live "
               "cache's bits (the remedy), the same bits on every CPU; tile order: the same with a bf16 "
               "model's linears in AMX's order (faster bf16 prefill where the CPU has AMX, other bits); "
               "torch: transformers' ops on libtorch"));
        return box;
    };
    constructionA_ = constructionBox(QStringLiteral("live"));
    dtypeA_ = dtypeBox();
    kernelsA_ = kernelsBox();
    constructionB_ = constructionBox(QStringLiteral("prefill"));
    dtypeB_ = dtypeBox();
    kernelsB_ = kernelsBox();
    compareButton_ = new QPushButton(tr("Compare"), bar);
    compareButton_->setToolTip(tr("Rebuild the same prefix ids both ways, continue from each, and compare"));
    row->addWidget(new QLabel(tr("Compare"), bar));
    row->addWidget(constructionA_);
    row->addWidget(dtypeA_);
    row->addWidget(kernelsA_);
    row->addWidget(new QLabel(tr("with"), bar));
    row->addWidget(constructionB_);
    row->addWidget(dtypeB_);
    row->addWidget(kernelsB_);
    row->addWidget(compareButton_);
    row->addStretch(1);
    connect(compareButton_, &QPushButton::clicked, this, &DecodeCompareView::requestCompare);
    return bar;
}

void DecodeCompareView::setSides(const SideSpec& a, const SideSpec& b) {
    constructionA_->setCurrentText(a.construction);
    dtypeA_->setCurrentIndex(std::max(0, dtypeA_->findData(a.dtype)));
    kernelsA_->setCurrentIndex(std::max(0, kernelsA_->findData(a.kernels)));
    constructionB_->setCurrentText(b.construction);
    dtypeB_->setCurrentIndex(std::max(0, dtypeB_->findData(b.dtype)));
    kernelsB_->setCurrentIndex(std::max(0, kernelsB_->findData(b.kernels)));
}

void DecodeCompareView::requestCompare() {
    emit compareRequested({constructionA_->currentText().trimmed(), dtypeA_->currentData().toString(),
                           kernelsA_->currentData().toString()},
                          {constructionB_->currentText().trimmed(), dtypeB_->currentData().toString(),
                           kernelsB_->currentData().toString()});
}

void DecodeCompareView::setupPlot() {
    plot_->setMinimumHeight(120);
    plot_->addGraph();
    plot_->graph(0)->setName(tr("live"));
    plot_->graph(0)->setPen(QPen(QColor(0x1f, 0x77, 0xb4), 1.5));
    plot_->addGraph();
    plot_->graph(1)->setName(tr("prefill"));
    plot_->graph(1)->setPen(QPen(QColor(0xff, 0x7f, 0x0e), 1.5, Qt::DashLine));
    plot_->xAxis->setLabel(tr("continuation step"));
    plot_->yAxis->setLabel(tr("top-1 minus top-2 logit"));
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
}

void DecodeCompareView::syncScrolling() {
    // Scrolling one pane scrolls the others (guarded against feedback by the equality check).
    const std::vector<TokenPane*> panes = {live_, prefill_, transplant_};
    for (TokenPane* from : panes)
        for (TokenPane* to : panes)
            if (from != to)
                connect(from->verticalScrollBar(), &QScrollBar::valueChanged, to, [to](int v) {
                    if (to->verticalScrollBar()->value() != v) to->verticalScrollBar()->setValue(v);
                });
}

std::vector<TokenCell> DecodeCompareView::cellsFor(const AnalysisView& a, const SideView& side, int highlight) const {
    std::vector<TokenCell> cells;
    for (std::size_t i = 0; i < a.prefix.size(); ++i)
        cells.push_back(
            {a.prefix[i], true, false, static_cast<int>(i) == a.promptLength && a.promptLength > 0, {}, {}});
    const std::size_t boundaryCell = cells.size();
    for (std::size_t i = 0; i < side.tokens.size(); ++i)
        cells.push_back({side.tokens[i], false, static_cast<int>(i) == highlight, i == 0, {}, {}});
    if (side.tokens.empty() && boundaryCell < cells.size()) cells[boundaryCell].boundaryBefore = true;
    return cells;
}

void DecodeCompareView::showAnalysis(const AnalysisView& a) {
    analysis_ = a;
    divergence_ = a.firstDivergence;
    live_->setCells(a.live.label, cellsFor(a, a.live, divergence_));
    prefill_->setCells(a.prefill.label, cellsFor(a, a.prefill, divergence_));
    plot_->graph(0)->setName(a.live.label.section(QLatin1Char(' '), 0, 0));
    plot_->graph(1)->setName(a.prefill.label.section(QLatin1Char(' '), 0, 0));
    transplant_->clearCells();
    transplant_->hide();
    const QString split = divergence_ < 0 ? tr("the continuations are identical (%1 tokens)").arg(a.live.tokens.size())
                                          : tr("the continuations split at step %1").arg(divergence_);
    const QString caches = !a.diffNote.isEmpty() ? a.diffNote : a.diff.bitExact ? tr("bit-identical") : tr("differ");
    summary_->setText(tr("<b>%1</b>: prefix of %2 tokens (%3 prompt); %4. Caches: %5.")
                          .arg(a.title.toHtmlEscaped())
                          .arg(a.prefix.size())
                          .arg(a.promptLength)
                          .arg(split, caches));
    plotMargins(a);
}

void DecodeCompareView::plotMargins(const AnalysisView& a) {
    for (int g = 0; g < 2; ++g) {
        const SideView& side = g == 0 ? a.live : a.prefill;
        QVector<double> x, y;
        for (std::size_t i = 0; i < side.tokens.size(); ++i) {
            x << static_cast<double>(i);
            y << side.tokens[i].margin;
        }
        plot_->graph(g)->setData(x, y);
    }
    plot_->clearItems();
    if (divergence_ >= 0) {
        auto* line = new QCPItemStraightLine(plot_);
        line->point1->setCoords(divergence_, 0);
        line->point2->setCoords(divergence_, 1);
        line->setPen(QPen(QColor(0xd0, 0x40, 0x00), 1, Qt::DotLine));
    }
    plot_->rescaleAxes();
    plot_->yAxis->setRangeLower(0);
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

void DecodeCompareView::showTransplant(const TransplantView& r) {
    std::vector<TokenCell> cells = cellsFor(analysis_, r.result, r.splitFromDonor);
    transplant_->setCells(tr("%1 \u2014 %2").arg(r.description, r.verdict), std::move(cells));
    transplant_->show();
}

void DecodeCompareView::clear() {
    analysis_ = {};
    divergence_ = -1;
    for (TokenPane* p : {live_, prefill_, transplant_}) p->clearCells();
    transplant_->hide();
    for (int g = 0; g < 2; ++g) plot_->graph(g)->data()->clear();
    plot_->clearItems();
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace kvscope::widgets
