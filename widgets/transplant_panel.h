// SPDX-License-Identifier: MIT
#pragma once
// Transplant controls: which layers (K and V separately), presets (all, none, halves, this item's
// localize result), direction and an optional position range. Run asks the worker to splice and
// continue; the result appears as a third pane in the decode view and as a verdict here.
#include "widgets/model_worker.h"

#include <QWidget>

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;
class QTableView;

namespace kvscope::widgets {

class LayerSelectionModel;

class TransplantPanel : public QWidget {
    Q_OBJECT
public:
    explicit TransplantPanel(QWidget* parent = nullptr);
    void setAnalysis(const AnalysisView& analysis);
    void showResult(const TransplantView& result);
    void setRunning(bool running);

    LayerSelectionModel* layers() const { return layers_; }
    TransplantRequest request() const;
    void setDirectionIntoPrefill(bool intoPrefill);
    QString verdictText() const;
    void applyLocalizePreset();

public slots:
    void run();

signals:
    void transplantRequested(const kvscope::widgets::TransplantRequest& request);

private:
    void setupWidgets();
    QWidget* presetButtons();

    LayerSelectionModel* layers_ = nullptr;
    QTableView* table_ = nullptr;
    QComboBox* direction_ = nullptr;
    QSpinBox *positionBegin_ = nullptr, *positionEnd_ = nullptr;
    QPushButton *runButton_ = nullptr, *localizeButton_ = nullptr;
    QLabel* verdict_ = nullptr;
    AnalysisView analysis_;
};

}  // namespace kvscope::widgets
