// SPDX-License-Identifier: MIT
#include "widgets/token_pane.h"

#include <QHelpEvent>
#include <QScrollBar>
#include <QToolTip>
#include <QUrl>

namespace kvscope::widgets {

QString tokenHtml(const QString& text) {
    QString html = text.toHtmlEscaped();
    html.replace(QLatin1Char('\n'), QStringLiteral("\u21b5<br>"));
    html.replace(QLatin1Char(' '), QStringLiteral("&nbsp;"));
    return html.isEmpty() ? QStringLiteral("\u2205") : html;
}

TokenPane::TokenPane(QWidget* parent) : QTextBrowser(parent) {
    setOpenLinks(false);
    setMouseTracking(true);
    connect(this, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
        bool ok = false;
        const int cell = url.fragment().mid(1).toInt(&ok);
        if (ok) emit tokenClicked(cell);
    });
}

void TokenPane::clearCells() { setCells({}, {}); }

void TokenPane::setCells(const QString& title, std::vector<TokenCell> cells) {
    title_ = title;
    cells_ = std::move(cells);
    const int scroll = verticalScrollBar()->value();
    QString html = QStringLiteral("<p><b>%1</b></p><p style=\"font-family:monospace\">").arg(title.toHtmlEscaped());
    for (std::size_t i = 0; i < cells_.size(); ++i) {
        const TokenCell& c = cells_[i];
        if (c.boundaryBefore) html += QStringLiteral("<span style=\"color:#d04000;font-weight:bold\">\u2502</span>");
        html +=
            QStringLiteral("<a href=\"#t%1\" style=\"%2\">%3</a>").arg(i).arg(cellStyle(c, i), tokenHtml(c.token.text));
    }
    html += QStringLiteral("</p>");
    setHtml(html);
    verticalScrollBar()->setValue(scroll);
}

QString cellStyle(const TokenCell& c, std::size_t index) {
    QString style = QStringLiteral("text-decoration:none;");
    style += c.dimmed ? QStringLiteral("color:#8a8a8a;") : QStringLiteral("color:palette(text);");
    if (c.highlighted) return style + QStringLiteral("background-color:#ffb0a0;color:#000000;font-weight:bold;");
    if (!c.shade.isEmpty()) return style + QStringLiteral("background-color:%1;color:#000000;").arg(c.shade);
    // Special tokens in blue on a blue tint, so a template's markers never read as text.
    if (c.token.special) return style + QStringLiteral("color:#1a5fb4;background-color:rgba(26,95,180,45);");
    // Every other token shaded, the prefix more lightly: each token's extent stays visible.
    if (index % 2)
        style += c.dimmed ? QStringLiteral("background-color:rgba(128,128,128,22);")
                          : QStringLiteral("background-color:rgba(128,128,128,40);");
    return style;
}

int TokenPane::highlightedCell() const {
    for (std::size_t i = 0; i < cells_.size(); ++i)
        if (cells_[i].highlighted) return static_cast<int>(i);
    return -1;
}

QString TokenPane::tooltipForCell(int cell) const {
    if (cell < 0 || cell >= static_cast<int>(cells_.size())) return {};
    const TokenCell& c = cells_[static_cast<std::size_t>(cell)];
    const TokenView& t = c.token;
    QString tip = tr("<b>%1</b> &nbsp; id %2 &nbsp; position %3").arg(tokenHtml(t.text)).arg(t.id).arg(cell);
    if (!c.note.isEmpty()) tip += QStringLiteral("<br>") + c.note;
    if (!t.hasStep) return tip + (c.note.isEmpty() ? tr("<br>(prefix token: no decoding step)") : QString());
    tip += tr("<br>logprob %1 &nbsp; margin %2").arg(t.logprob, 0, 'g', 5).arg(t.margin, 0, 'g', 5);
    tip += QStringLiteral("<table>");
    for (const auto& [text, logit] : t.top)
        tip += QStringLiteral("<tr><td>%1</td><td align=right>%2</td></tr>").arg(tokenHtml(text)).arg(logit, 0, 'f', 4);
    return tip + QStringLiteral("</table>");
}

int TokenPane::cellAt(const QPoint& viewportPos) const {
    const QString anchor = anchorAt(viewportPos);
    bool ok = false;
    const int cell = anchor.startsWith(QStringLiteral("#t")) ? anchor.mid(2).toInt(&ok) : -1;
    return ok ? cell : -1;
}

bool TokenPane::viewportEvent(QEvent* e) {
    if (e->type() == QEvent::ToolTip) {  // the viewport gets tooltip events, at viewport coordinates
        auto* help = static_cast<QHelpEvent*>(e);
        const int cell = cellAt(help->pos());
        if (cell >= 0)
            QToolTip::showText(help->globalPos(), tooltipForCell(cell), this);
        else
            QToolTip::hideText();
        return true;
    }
    return QTextBrowser::viewportEvent(e);
}

}  // namespace kvscope::widgets
