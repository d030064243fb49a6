// SPDX-License-Identifier: MIT
#pragma once
// The interactive session (no ledger needed): open a model, type a prompt or paste ids, decode live
// (tokens stream in), click a generated token to set the stage boundary, then compare the live
// cache there with a one-shot prefill of the same ids - the whole study on one item by hand.
#include "widgets/model_worker.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTimer;

namespace kvscope::widgets {

class TokenPane;

class SessionPage : public QWidget {
    Q_OBJECT
public:
    explicit SessionPage(QWidget* parent = nullptr);

    void setModelDir(const QString& dir);
    QString modelDir() const;
    QString dtype() const;
    void setPrompt(const QString& text);
    void setBoundary(int generatedTokens);  // tokens of the trace kept in the prefix
    int boundary() const { return boundary_; }
    void setBusy(bool busy);

    // From the worker, the current decode's only (the window drops a superseded decode's):
    void appendToken(const TokenView& token);
    void showDecode(const SessionDecode& decode);
    TokenPane* livePane() const { return pane_; }

public slots:
    void requestDecode();
    void requestCompare();

signals:
    void openModelRequested(const QString& dir, const QString& dtype);
    void decodeRequested(const QString& promptText, const QString& promptIds, int maxNewTokens);
    void compareRequested(const std::vector<int64_t>& prompt, const std::vector<int64_t>& trace, int boundary,
                          int maxNewTokens);

private:
    void setupWidgets();
    void render();

    QLineEdit* modelDir_ = nullptr;
    QComboBox* dtype_ = nullptr;
    QPlainTextEdit* prompt_ = nullptr;
    QCheckBox* promptIsIds_ = nullptr;
    QSpinBox* maxNewTokens_ = nullptr;
    QPushButton *decodeButton_ = nullptr, *compareButton_ = nullptr;
    QLabel* status_ = nullptr;
    TokenPane* pane_ = nullptr;
    QTimer* renderTimer_ = nullptr;  // coalesces re-rendering while tokens stream in
    SessionDecode decode_;
    std::vector<TokenView> streaming_;
    int boundary_ = 0;
};

}  // namespace kvscope::widgets
