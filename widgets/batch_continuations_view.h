// SPDX-License-Identifier: MIT
#pragma once
// The batch protocol's view of an item: for each kernel set, the item's greedy continuation decoded
// alone, and beside it (below, one pane each) its continuation as the first row of each left-padded
// batch size, the first token that differs from alone's highlighted and the ledger's cell (logits
// and prompt cache equal or not, the first differing op) in the pane's title.
#include "widgets/model_worker.h"

#include <QWidget>

#include <vector>

class QLabel;
class QSplitter;

namespace kvscope::widgets {

class TokenPane;

class BatchContinuationsView : public QWidget {
    Q_OBJECT
public:
    explicit BatchContinuationsView(QWidget* parent = nullptr);
    void showAnalysis(const AnalysisView& analysis);  // analysis.batch: empty says the run has none
    void clear();

    const std::vector<TokenPane*>& panes() const { return panes_; }  // in analysis.batch's order
    QString noteText() const;

private:
    QLabel* note_ = nullptr;
    QSplitter* splitter_ = nullptr;
    std::vector<TokenPane*> panes_;
};

}  // namespace kvscope::widgets
