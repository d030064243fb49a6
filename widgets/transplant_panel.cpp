// SPDX-License-Identifier: MIT
#include "widgets/transplant_panel.h"

#include "widgets/layer_selection_model.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

namespace kvscope::widgets {

TransplantPanel::TransplantPanel(QWidget* parent) : QWidget(parent), layers_(new LayerSelectionModel(this)) {
    setupWidgets();
    setEnabled(false);
}

QWidget* TransplantPanel::presetButtons() {
    auto* box = new QWidget(this);
    auto* row = new QHBoxLayout(box);
    row->setContentsMargins(0, 0, 0, 0);
    auto add = [&](const QString& label, auto slot) {
        auto* b = new QPushButton(label, box);
        connect(b, &QPushButton::clicked, this, slot);
        row->addWidget(b);
        return b;
    };
    add(tr("All"), [this] { layers_->selectAll(); });
    add(tr("None"), [this] { layers_->selectNone(); });
    add(tr("First half"), [this] { layers_->selectFirstHalf(); });
    add(tr("Second half"), [this] { layers_->selectSecondHalf(); });
    localizeButton_ = add(tr("Localize result"), [this] { applyLocalizePreset(); });
    return box;
}

void TransplantPanel::setupWidgets() {
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(presetButtons());
    table_ = new QTableView(this);
    table_->setModel(layers_);
    table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    table_->verticalHeader()->hide();
    layout->addWidget(table_, 1);

    auto* form = new QFormLayout;
    direction_ = new QComboBox(this);
    direction_->addItem(tr("prefill \u2190 live (live cache is the donor)"), true);
    direction_->addItem(tr("live \u2190 prefill (prefill cache is the donor)"), false);
    form->addRow(tr("Direction"), direction_);
    auto* positions = new QHBoxLayout;
    positionBegin_ = new QSpinBox(this);
    positionEnd_ = new QSpinBox(this);
    positionBegin_->setRange(0, 1 << 24);
    positionEnd_->setRange(-1, 1 << 24);
    positionEnd_->setValue(-1);
    positionEnd_->setSpecialValueText(tr("end"));
    positions->addWidget(positionBegin_);
    positions->addWidget(new QLabel(tr("to"), this));
    positions->addWidget(positionEnd_);
    form->addRow(tr("Positions"), positions);
    layout->addLayout(form);

    runButton_ = new QPushButton(tr("Run transplant"), this);
    runButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_T));
    connect(runButton_, &QPushButton::clicked, this, &TransplantPanel::run);
    layout->addWidget(runButton_);
    verdict_ = new QLabel(this);
    verdict_->setWordWrap(true);
    layout->addWidget(verdict_);
}

void TransplantPanel::setAnalysis(const AnalysisView& a) {
    analysis_ = a;
    layers_->setLayerCount(a.layers);
    layers_->selectAll();
    positionBegin_->setMaximum(static_cast<int>(a.prefix.size()));
    positionEnd_->setMaximum(static_cast<int>(a.prefix.size()));
    localizeButton_->setEnabled(a.hasLocalize);
    localizeButton_->setToolTip(a.hasLocalize ? tr("The smallest layer range the localize protocol found sufficient")
                                              : tr("No localize result for this item (not divergent, or not run)"));
    verdict_->clear();
    setEnabled(true);
}

void TransplantPanel::applyLocalizePreset() {
    if (!analysis_.hasLocalize || analysis_.localizeLayers.empty()) return;
    layers_->selectNone();
    for (int64_t l : analysis_.localizeLayers) {
        if (analysis_.localizeKeys)
            layers_->setData(layers_->index(static_cast<int>(l), LayerSelectionModel::KeysColumn), Qt::Checked,
                             Qt::CheckStateRole);
        if (analysis_.localizeValues)
            layers_->setData(layers_->index(static_cast<int>(l), LayerSelectionModel::ValuesColumn), Qt::Checked,
                             Qt::CheckStateRole);
    }
}

void TransplantPanel::setDirectionIntoPrefill(bool intoPrefill) { direction_->setCurrentIndex(intoPrefill ? 0 : 1); }

TransplantRequest TransplantPanel::request() const {
    TransplantRequest r;
    r.intoPrefill = direction_->currentData().toBool();
    r.keyLayers = layers_->layersWithKeys();
    r.valueLayers = layers_->layersWithValues();
    r.positionBegin = positionBegin_->value();
    r.positionEnd = positionEnd_->value();
    return r;
}

void TransplantPanel::run() {
    verdict_->setText(tr("Running\u2026"));
    emit transplantRequested(request());
}

void TransplantPanel::setRunning(bool running) { runButton_->setEnabled(!running); }

void TransplantPanel::showResult(const TransplantView& r) {
    const QString where = r.splitFromDonor < 0 ? tr("identical to the donor's continuation")
                                               : tr("leaves the donor's continuation at step %1").arg(r.splitFromDonor);
    verdict_->setText(tr("<b>%1</b> &mdash; %2<br><small>%3</small>")
                          .arg(r.verdict.toHtmlEscaped(), where, r.description.toHtmlEscaped()));
}

QString TransplantPanel::verdictText() const { return verdict_->text(); }

}  // namespace kvscope::widgets
