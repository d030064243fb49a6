// SPDX-License-Identifier: MIT
#include "widgets/trajectory_view.h"

#include "widgets/mismatch_strip.h"
#include "widgets/token_pane.h"

#include <QLabel>
#include <QVBoxLayout>

namespace kvscope::widgets {

using experiments::ItemRecord;

TrajectoryView::TrajectoryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    header_ = new QLabel(tr("Select an imported trajectory in the ledger."), this);
    header_->setWordWrap(true);
    header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    strip_ = new MismatchStrip(this);
    pane_ = new TokenPane(this);
    location_ = new QLabel(tr("Click a token to locate where the references part at its step."), this);
    location_->setWordWrap(true);
    location_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(header_);
    layout->addWidget(strip_);
    layout->addWidget(pane_, 1);
    layout->addWidget(location_);
    connect(strip_, &MismatchStrip::stepClicked, this, &TrajectoryView::requestLocate);
    connect(pane_, &TokenPane::tokenClicked, this, [this](int cell) {
        if (const int step = stepOfCell(cell); step >= 0) requestLocate(step);
    });
}

void TrajectoryView::clear() {
    item_ = {};
    deltas_.clear();
    tokens_.reset();
    header_->setText(tr("Select an imported trajectory in the ledger."));
    location_->clear();
    strip_->setDeltas({}, -1, {});
    pane_->clearCells();
}

void TrajectoryView::showItem(const ItemRecord& item, const experiments::DeltaBasis& basis) {
    item_ = item;
    tokens_.reset();
    strip_->setSelectedStep(-1);
    location_->setText(tr("Click a token to locate where the references part at its step."));
    setBasis(basis);
}

void TrajectoryView::setBasis(const experiments::DeltaBasis& basis) {
    basis_ = basis;
    deltas_ = experiments::absDeltas(item_, basis_);
    render();
}

void TrajectoryView::setTokens(const TrajectoryTokens& tokens) {
    if (tokens.itemId != itemId()) return;
    tokens_ = tokens;
    render();
}

QString TrajectoryView::tokenText(int64_t id) const {
    if (tokens_)
        if (const auto it = tokens_->argmaxTexts.find(id); it != tokens_->argmaxTexts.end()) return it->second;
    return QStringLiteral("#%1").arg(id);
}

int TrajectoryView::stepOfCell(int cell) const {
    const std::optional<std::vector<int64_t>>& prompt = item_.trajectories.prompt;
    const int promptLength = prompt ? static_cast<int>(prompt->size()) : 0;
    const int step = cell - promptLength;
    return step >= 0 && step < static_cast<int>(deltas_.size()) ? step : -1;
}

QString TrajectoryView::headerText() const { return header_->text(); }
QString TrajectoryView::locationText() const { return location_->text(); }

QString TrajectoryView::describeStep(int step) const {
    const std::optional<std::vector<int64_t>>& output = item_.trajectories.output;
    if (step < 0 || !output || step >= static_cast<int>(output->size())) return {};
    const auto s = static_cast<std::size_t>(step);
    QString text = tr("step %1").arg(step);
    const experiments::EngineRecord* engine = item_.results.engine ? &*item_.results.engine : nullptr;
    if (engine && engine->logprobs)
        text += tr("<br>engine (%1) logprob %2")
                    .arg(QString::fromStdString(engine->engine))
                    .arg((*engine->logprobs)[s], 0, 'g', 7);
    if (s < deltas_.size() && deltas_[s])
        text += tr("<br><b>|delta| %1</b> (%2)").arg(*deltas_[s], 0, 'g', 4).arg(QString::fromStdString(basis_.name()));
    for (const auto& [label, replay] : item_.results.replays) {
        if (s >= replay.logprobs.size()) continue;
        const bool chosen = label == basis_.label;
        const int64_t argmax = replay.argmaxes[s];
        const QString argmaxText =
            argmax == (*output)[s]
                ? tr("the engine's token")
                : tr("<span style=\"color:#c00000\">%1 [%2]</span>").arg(tokenHtml(tokenText(argmax))).arg(argmax);
        text += tr("<br>%1%2%3: logprob %4, argmax %5, margin %6, rank %7")
                    .arg(chosen ? QStringLiteral("<b>") : QString(), QString::fromStdString(label),
                         chosen ? QStringLiteral("</b>") : QString())
                    .arg(replay.logprobs[s], 0, 'g', 7)
                    .arg(argmaxText)
                    .arg(replay.margins[s], 0, 'g', 4)
                    .arg(replay.ranks[s]);
    }
    return text;
}

TokenView TrajectoryView::placeholder(int64_t id) const {
    TokenView t;
    t.id = id;
    t.text = tokenText(id);
    return t;
}

void TrajectoryView::render() {
    const std::optional<std::vector<int64_t>>& prompt = item_.trajectories.prompt;
    const std::optional<std::vector<int64_t>>& output = item_.trajectories.output;
    if (!prompt || !output) return;
    const experiments::ItemMismatch m = experiments::itemMismatch(item_, basis_);
    QString header = tr("<b>%1</b>: %2 prompt tokens, %3 output tokens")
                         .arg(itemId().toHtmlEscaped())
                         .arg(prompt->size())
                         .arg(output->size());
    if (const auto& e = item_.results.engine)
        header += tr(" from %1 (%2%3)")
                      .arg(QString::fromStdString(e->engine).toHtmlEscaped(), QString::fromStdString(e->dtype),
                           e->batchSize ? tr(", batch of %1").arg(*e->batchSize) : QString());
    if (!m.replayed)
        header += tr("<br>No replay %1 for this item: run <tt>kvscope replay</tt>.")
                      .arg(QString::fromStdString(basis_.label));
    else
        header += tr("<br>%1: max |delta| %2, mean %3; first argmax mismatch %4")
                      .arg(QString::fromStdString(basis_.name()).toHtmlEscaped(),
                           m.maxAbsDelta ? QString::number(*m.maxAbsDelta, 'g', 4) : tr("-"),
                           m.meanAbsDelta ? QString::number(*m.meanAbsDelta, 'g', 4) : tr("-"),
                           m.firstArgmaxMismatch ? tr("at step %1").arg(*m.firstArgmaxMismatch) : tr("none"));
    header_->setText(header);
    const int marked = m.firstArgmaxMismatch ? static_cast<int>(*m.firstArgmaxMismatch) : -1;
    const int located = strip_->selectedStep();  // a step located before the texts came stays marked
    strip_->setDeltas(deltas_, marked, [this](int step) { return describeStep(step); });
    if (located < static_cast<int>(deltas_.size())) strip_->setSelectedStep(located);

    std::vector<TokenCell> cells;
    for (std::size_t i = 0; i < prompt->size(); ++i) {
        TokenCell c;
        c.token = tokens_ && i < tokens_->prompt.size() ? tokens_->prompt[i] : placeholder((*prompt)[i]);
        c.dimmed = true;
        cells.push_back(c);
    }
    for (std::size_t i = 0; i < output->size(); ++i) {
        TokenCell c;
        c.token = tokens_ && i < tokens_->output.size() ? tokens_->output[i] : placeholder((*output)[i]);
        c.boundaryBefore = i == 0;
        c.highlighted = static_cast<int>(i) == marked;
        if (i < deltas_.size() && deltas_[i]) c.shade = deltaColor(deltas_[i]).name();
        c.note = describeStep(static_cast<int>(i));
        cells.push_back(c);
    }
    pane_->setCells(tr("prompt, then the engine's output (shaded by |delta logprob|)"), std::move(cells));
}

void TrajectoryView::requestLocate(int step) {
    strip_->setSelectedStep(step);
    const auto [a, b] = experiments::referencesToLocate(basis_);
    location_->setText(
        tr("Locating step %1: %2 vs %3\u2026").arg(step).arg(QString::fromStdString(a), QString::fromStdString(b)));
    emit locateRequested(step);
}

void TrajectoryView::showLocation(const StepLocation& l) {
    if (l.itemId != itemId()) return;
    strip_->setSelectedStep(l.step);
    if (!l.differs)
        location_->setText(tr("Step %1, %2 (%3): all %4 ops bit-equal; the references compute this step alike.")
                               .arg(l.step)
                               .arg(l.references, l.model)
                               .arg(l.opsCompared));
    else
        location_->setText(tr("Step %1, %2 (%3): they first part at <b>%4</b> (%5 of %6 values differ, max |diff| "
                              "%7), of %8 ops compared.")
                               .arg(l.step)
                               .arg(l.references, l.model, l.firstOp.toHtmlEscaped())
                               .arg(l.differing)
                               .arg(l.elements)
                               .arg(l.maxAbs, 0, 'g', 4)
                               .arg(l.opsCompared));
}

}  // namespace kvscope::widgets
