// SPDX-License-Identifier: MIT
#pragma once
// An imported trajectory as the engine produced it: the mismatch strip (|delta logprob| per output
// token on the chosen basis), the prompt and output tokens shaded the same way, hover for each
// token's numbers (the engine's logprob, every replay's, the replay's argmax, margin and rank), and a
// click on a token or a cell to locate the first op where the basis's two references part at that
// step (the locator runs in the worker; showLocation shows what it found).
#include "widgets/model_worker.h"

#include "experiments/replay_inspection.h"

#include <QWidget>

#include <map>

class QLabel;

namespace kvscope::widgets {

class MismatchStrip;
class TokenPane;

class TrajectoryView : public QWidget {
    Q_OBJECT
public:
    explicit TrajectoryView(QWidget* parent = nullptr);
    // The numbers show at once; the tokens read "#id" until setTokens brings their text.
    void showItem(const experiments::ItemRecord& item, const experiments::DeltaBasis& basis);
    void setBasis(const experiments::DeltaBasis& basis);
    void setTokens(const TrajectoryTokens& tokens);  // ignored unless for the shown item
    void showLocation(const StepLocation& location);
    void clear();

    QString itemId() const { return QString::fromStdString(item_.itemId); }
    const experiments::DeltaBasis& basis() const { return basis_; }
    QString headerText() const;
    QString locationText() const;
    MismatchStrip* strip() const { return strip_; }
    TokenPane* pane() const { return pane_; }
    int stepOfCell(int cell) const;  // the output step a pane cell shows; -1 for the prompt's cells
    QString describeStep(int step) const;  // a token's hover numbers (HTML)

signals:
    void locateRequested(int step);

private:
    void render();
    void requestLocate(int step);
    QString tokenText(int64_t id) const;  // "#id" until the worker sends the texts
    TokenView placeholder(int64_t id) const;

    QLabel *header_ = nullptr, *location_ = nullptr;
    MismatchStrip* strip_ = nullptr;
    TokenPane* pane_ = nullptr;
    experiments::ItemRecord item_;
    experiments::DeltaBasis basis_;
    std::vector<std::optional<double>> deltas_;
    std::optional<TrajectoryTokens> tokens_;
};

}  // namespace kvscope::widgets
