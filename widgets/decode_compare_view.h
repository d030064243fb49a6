// SPDX-License-Identifier: MIT
#pragma once
// Side-by-side decodes: live and prefill continuations from the same prefix (and a third pane for a
// transplant's result), scrolled together, with a plot of the top-1/top-2 margin per step for both
// sides and the divergence marked.
#include "widgets/model_worker.h"

#include <QWidget>

class QComboBox;
class QCustomPlot;
class QLabel;
class QPushButton;

namespace kvscope::widgets {

class TokenPane;

class DecodeCompareView : public QWidget {
    Q_OBJECT
public:
    explicit DecodeCompareView(QWidget* parent = nullptr);
    void showAnalysis(const AnalysisView& analysis);
    void showTransplant(const TransplantView& result);
    void clear();

    TokenPane* livePane() const { return live_; }
    TokenPane* prefillPane() const { return prefill_; }
    TokenPane* transplantPane() const { return transplant_; }
    int divergenceIndex() const { return divergence_; }  // in the continuations; -1 when equal
    // The "compare any two" controls.
    void setSides(const SideSpec& a, const SideSpec& b);
    void requestCompare();

signals:
    void compareRequested(const kvscope::widgets::SideSpec& a, const kvscope::widgets::SideSpec& b);

private:
    void setupPanes();
    QWidget* setupSideSelector();
    void setupPlot();
    void syncScrolling();
    std::vector<struct TokenCell> cellsFor(const AnalysisView& a, const SideView& side, int highlight) const;
    void plotMargins(const AnalysisView& a);

    TokenPane *live_ = nullptr, *prefill_ = nullptr, *transplant_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QLabel* summary_ = nullptr;
    QComboBox *constructionA_ = nullptr, *constructionB_ = nullptr, *dtypeA_ = nullptr, *dtypeB_ = nullptr;
    QComboBox *kernelsA_ = nullptr, *kernelsB_ = nullptr;
    QPushButton* compareButton_ = nullptr;
    AnalysisView analysis_;
    int divergence_ = -1;
};

}  // namespace kvscope::widgets
