// SPDX-License-Identifier: MIT
#pragma once
// Above an imported run's trajectories: which replay to look at and against what (the engine's own
// logprobs or another replay: the basis every other view of the run follows), what that says for
// the run in one line, and the histogram of |delta logprob| over all its tokens in fixed decades,
// coloured as the tokens are.
#include "experiments/replay_inspection.h"

#include <QWidget>

#include <vector>

class QComboBox;
class QCustomPlot;
class QLabel;

namespace kvscope::widgets {

// "32 trajectories, 2048 output tokens | prefill/torch/bf16 vs engine: mean |delta| 0.0012, ..."
QString replaySummaryLine(const std::vector<experiments::ItemRecord>& items, const experiments::DeltaBasis& basis);

class ReplaySummaryView : public QWidget {
    Q_OBJECT
public:
    explicit ReplaySummaryView(QWidget* parent = nullptr);
    // Offers the run's replays; keeps the chosen basis where the run has it, else the first replay
    // against the engine. Emits basisChanged.
    void setItems(const std::vector<experiments::ItemRecord>& items);
    void setBasis(const experiments::DeltaBasis& basis);  // a label the run lacks is ignored
    const experiments::DeltaBasis& basis() const { return basis_; }

    QString summaryText() const;
    QCustomPlot* plot() const { return plot_; }
    const std::vector<experiments::DeltaBin>& bins() const { return bins_; }
    QComboBox* replayBox() const { return replay_; }
    QComboBox* againstBox() const { return against_; }

signals:
    void basisChanged(const experiments::DeltaBasis& basis);

private:
    void setupPlot();
    void fillAgainst();
    void onChoice();
    void showBasis();

    QComboBox *replay_ = nullptr, *against_ = nullptr;
    QLabel* summary_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    std::vector<experiments::ItemRecord> items_;
    std::vector<experiments::DeltaBin> bins_;
    experiments::DeltaBasis basis_;
    bool filling_ = false;  // the combos are being refilled: their signals are not choices
};

}  // namespace kvscope::widgets
