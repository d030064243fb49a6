// SPDX-License-Identifier: MIT
#include "widgets/session_page.h"

#include "widgets/token_pane.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

namespace kvscope::widgets {

SessionPage::SessionPage(QWidget* parent) : QWidget(parent) {
    setupWidgets();
    renderTimer_ = new QTimer(this);
    renderTimer_->setSingleShot(true);
    renderTimer_->setInterval(40);
    connect(renderTimer_, &QTimer::timeout, this, &SessionPage::render);
}

void SessionPage::setupWidgets() {
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    auto* modelRow = new QHBoxLayout;
    modelDir_ = new QLineEdit(this);
    modelDir_->setPlaceholderText(tr("Hugging Face model folder (config.json, *.safetensors, tokenizer.json)"));
    auto* browse = new QPushButton(tr("Browse\u2026"), this);
    auto* browseGguf = new QPushButton(tr("GGUF file\u2026"), this);
    browseGguf->setToolTip(tr("A llama.cpp GGUF file (llama, qwen2, qwen3), dequantized as transformers loads it"));
    dtype_ = new QComboBox(this);
    dtype_->addItems({QStringLiteral("bf16"), QStringLiteral("fp32"), QStringLiteral("fp16")});
    auto* load = new QPushButton(tr("Load"), this);
    modelRow->addWidget(modelDir_, 1);
    modelRow->addWidget(browse);
    modelRow->addWidget(browseGguf);
    modelRow->addWidget(dtype_);
    modelRow->addWidget(load);
    form->addRow(tr("Model"), modelRow);
    prompt_ = new QPlainTextEdit(this);
    prompt_->setPlaceholderText(tr("Prompt text, or token ids separated by commas"));
    prompt_->setMaximumHeight(90);
    form->addRow(tr("Prompt"), prompt_);
    auto* decodeRow = new QHBoxLayout;
    promptIsIds_ = new QCheckBox(tr("prompt is ids"), this);
    maxNewTokens_ = new QSpinBox(this);
    maxNewTokens_->setRange(1, 32768);
    maxNewTokens_->setValue(64);
    maxNewTokens_->setPrefix(tr("max new tokens "));
    decodeButton_ = new QPushButton(tr("Decode live"), this);
    decodeButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    compareButton_ = new QPushButton(tr("Compare at boundary"), this);
    compareButton_->setEnabled(false);
    decodeRow->addWidget(promptIsIds_);
    decodeRow->addWidget(maxNewTokens_);
    decodeRow->addStretch(1);
    decodeRow->addWidget(decodeButton_);
    decodeRow->addWidget(compareButton_);
    form->addRow(QString(), decodeRow);
    layout->addLayout(form);
    status_ = new QLabel(tr("Open a model, decode, then click a generated token to set the stage boundary."), this);
    status_->setWordWrap(true);
    layout->addWidget(status_);
    pane_ = new TokenPane(this);
    layout->addWidget(pane_, 1);

    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open model folder"), modelDir_->text());
        if (!dir.isEmpty()) modelDir_->setText(dir);
    });
    connect(browseGguf, &QPushButton::clicked, this, [this] {
        const QString file = QFileDialog::getOpenFileName(this, tr("Open GGUF model"), modelDir_->text(),
                                                          tr("GGUF models (*.gguf);;All files (*)"));
        if (!file.isEmpty()) modelDir_->setText(file);
    });
    connect(load, &QPushButton::clicked, this, [this] { emit openModelRequested(modelDir(), dtype()); });
    connect(decodeButton_, &QPushButton::clicked, this, &SessionPage::requestDecode);
    connect(compareButton_, &QPushButton::clicked, this, &SessionPage::requestCompare);
    connect(pane_, &TokenPane::tokenClicked, this, [this](int cell) {
        setBoundary(cell - static_cast<int>(decode_.prompt.size()) + 1);  // keep the clicked token in the prefix
    });
}

void SessionPage::setModelDir(const QString& dir) { modelDir_->setText(dir); }
QString SessionPage::modelDir() const { return modelDir_->text(); }
QString SessionPage::dtype() const { return dtype_->currentText(); }
void SessionPage::setPrompt(const QString& text) { prompt_->setPlainText(text); }

void SessionPage::setBusy(bool busy) {
    decodeButton_->setEnabled(!busy);
    compareButton_->setEnabled(!busy && !decode_.traceIds.empty() && boundary_ > 0);
}

void SessionPage::requestDecode() {
    decode_ = {};
    streaming_.clear();
    boundary_ = 0;
    render();
    const QString text = prompt_->toPlainText();
    emit decodeRequested(promptIsIds_->isChecked() ? QString() : text, promptIsIds_->isChecked() ? text : QString(),
                         maxNewTokens_->value());
}

void SessionPage::appendToken(const TokenView& token) {
    streaming_.push_back(token);
    if (!renderTimer_->isActive()) renderTimer_->start();
}

void SessionPage::showDecode(const SessionDecode& d) {
    decode_ = d;
    streaming_.clear();
    setBoundary(static_cast<int>(d.traceIds.size()) / 2);
}

void SessionPage::setBoundary(int generatedTokens) {
    const int n = static_cast<int>(decode_.traceIds.size());
    boundary_ = n == 0 ? 0 : std::clamp(generatedTokens, 1, std::max(1, n - 1));
    compareButton_->setEnabled(n > 1);
    status_->setText(n == 0 ? tr("Decoding\u2026")
                            : tr("Stage boundary after %1 of %2 generated tokens (click a token to move it). "
                                 "Compare rebuilds the prefix as one prefill and continues from both caches.")
                                  .arg(boundary_)
                                  .arg(n));
    render();
}

void SessionPage::render() {
    std::vector<TokenCell> cells;
    for (const TokenView& t : decode_.prompt) cells.push_back({t, true, false, false, {}, {}});
    const auto& trace = decode_.trace.empty() ? streaming_ : decode_.trace;
    for (std::size_t i = 0; i < trace.size(); ++i)
        cells.push_back({trace[i], false, false, boundary_ > 0 && static_cast<int>(i) == boundary_, {}, {}});
    pane_->setCells(tr("live decode"), std::move(cells));
}

void SessionPage::requestCompare() {
    if (decode_.traceIds.empty() || boundary_ <= 0) return;
    emit compareRequested(decode_.promptIds, decode_.traceIds, boundary_, maxNewTokens_->value());
}

}  // namespace kvscope::widgets
