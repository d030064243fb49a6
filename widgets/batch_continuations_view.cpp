// SPDX-License-Identifier: MIT
#include "widgets/batch_continuations_view.h"

#include "widgets/token_pane.h"

#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>

namespace kvscope::widgets {

namespace {
QString noBatchText() {
    return QObject::tr("The batch protocol did not run for this item: its run has no [batch] results.");
}

QString titleOf(const AnalysisView::BatchSide& side) {
    if (side.size == 1) return QObject::tr("%1 kernels, alone (a batch of 1)").arg(side.kernels);
    QString title = QObject::tr("%1 kernels, first row of a batch of %2: ").arg(side.kernels).arg(side.size);
    title += side.firstDivergence < 0 ? QObject::tr("the same tokens as alone")
                                      : QObject::tr("parts from alone at step %1").arg(side.firstDivergence);
    return side.note.isEmpty() ? title : title + QStringLiteral("; ") + side.note;
}
}  // namespace

BatchContinuationsView::BatchContinuationsView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    note_ = new QLabel(noBatchText(), this);
    note_->setWordWrap(true);
    splitter_ = new QSplitter(Qt::Vertical, this);
    layout->addWidget(note_);
    layout->addWidget(splitter_, 1);
}

QString BatchContinuationsView::noteText() const { return note_->text(); }

void BatchContinuationsView::clear() {
    for (TokenPane* pane : panes_) pane->deleteLater();
    panes_.clear();
    note_->setText(noBatchText());
}

void BatchContinuationsView::showAnalysis(const AnalysisView& analysis) {
    clear();
    if (analysis.batch.empty()) return;
    note_->setText(tr("%1: the prompt's greedy continuation alone and inside left-padded batches (fillers: the "
                      "dataset's next items), %2 new tokens each.")
                       .arg(analysis.title)
                       .arg(analysis.batch.front().tokens.size()));
    for (const AnalysisView::BatchSide& side : analysis.batch) {
        auto* pane = new TokenPane(splitter_);
        std::vector<TokenCell> cells;
        for (std::size_t i = 0; i < side.tokens.size(); ++i) {
            TokenCell c;
            c.token = side.tokens[i];
            c.highlighted = static_cast<int>(i) == side.firstDivergence;
            cells.push_back(c);
        }
        pane->setCells(titleOf(side), std::move(cells));
        panes_.push_back(pane);
    }
}

}  // namespace kvscope::widgets
