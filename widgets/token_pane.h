// SPDX-License-Identifier: MIT
#pragma once
// One decode as text: each token a span whose tooltip shows its id, logprob, margin and the top
// alternatives. The shared prefix is dimmed, the stage boundary marked, one token can be
// highlighted (the first divergence). Clicking a token emits tokenClicked (the session uses it to
// set the stage boundary).
#include "widgets/model_worker.h"

#include <QTextBrowser>

#include <vector>

namespace kvscope::widgets {

struct TokenCell {
    TokenView token;
    bool dimmed = false;          // part of the shared prefix
    bool highlighted = false;     // the first divergent token
    bool boundaryBefore = false;  // draw the stage-boundary mark before this token
    QString shade;                // a CSS background colour that carries a measure (|delta logprob|); empty: none
    QString note;                 // more tooltip lines (HTML) below the token's own
};

class TokenPane : public QTextBrowser {
    Q_OBJECT
public:
    explicit TokenPane(QWidget* parent = nullptr);
    void setCells(const QString& title, std::vector<TokenCell> cells);
    void clearCells();
    const std::vector<TokenCell>& cells() const { return cells_; }
    int highlightedCell() const;              // -1 when none
    QString tooltipForCell(int cell) const;   // what hovering shows

signals:
    void tokenClicked(int cell);

protected:
    bool viewportEvent(QEvent* event) override;

private:
    int cellAt(const QPoint& viewportPos) const;
    QString title_;
    std::vector<TokenCell> cells_;
};

// Escapes a token for HTML and makes whitespace visible enough to read (newlines break the line).
QString tokenHtml(const QString& text);
// The CSS of cell `index`: the divergent token red, a cell's own shade where it has one, special
// tokens blue, every other token shaded (lightly in the dimmed prefix) so token boundaries show.
QString cellStyle(const TokenCell& cell, std::size_t index);

}  // namespace kvscope::widgets
