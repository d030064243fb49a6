// SPDX-License-Identifier: MIT
#pragma once
// One imported trajectory's per-token mismatch as a strip of cells, a cell per output token coloured
// by its |delta logprob| (the colours of the run's |delta| histogram), the first step whose engine
// token is not the replay's argmax marked. Hovering a cell shows its numbers; clicking it asks for
// that step to be located.
#include <QWidget>

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace kvscope::widgets {

// The colour of experiments::absDeltaHistogram's bin `bin`: green for exactly 0, then pale yellow
// through orange to dark red by decade. No delta (the engine gave no logprob there): grey.
QColor deltaBinColor(std::size_t bin);
QColor deltaColor(std::optional<double> absDelta);

class MismatchStrip : public QWidget {
    Q_OBJECT
public:
    explicit MismatchStrip(QWidget* parent = nullptr);
    // `describe(step)`: the hover text (HTML) of a cell. `marked`: the first argmax mismatch, -1 none.
    void setDeltas(std::vector<std::optional<double>> deltas, int marked, std::function<QString(int)> describe);
    void setSelectedStep(int step);  // outlined (the located step); -1 none
    const std::vector<std::optional<double>>& deltas() const { return deltas_; }
    int markedStep() const { return marked_; }
    int selectedStep() const { return selected_; }
    int stepAt(const QPoint& pos) const;  // -1 outside the cells
    QRect cellRect(int step) const;
    QString tooltipFor(int step) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

signals:
    void stepClicked(int step);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    bool event(QEvent* event) override;

private:
    std::vector<std::optional<double>> deltas_;
    std::function<QString(int)> describe_;
    int marked_ = -1, selected_ = -1;
};

}  // namespace kvscope::widgets
