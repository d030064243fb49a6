// SPDX-License-Identifier: MIT
// An imported run in the GUI: its trajectories' table sorts by mismatch and passes the model tester,
// the summary offers every replay and counts tokens by |delta| decade, the strip and the tokens are
// coloured by |delta| with the numbers on hover, and a clicked step is located between the basis's
// references exactly as experiments::locateReplayStep says. And the batch protocol's items show each
// batch size's continuation beside the alone one.
// libtorch's headers come before any Qt header (Qt's `slots` macro would rewrite identifiers in them).
#include "experiments/replay_locate.h"

#include "core/model/transformer.h"

#include "support/test_support.h"
#include "widgets_fixture.h"

#include "widgets/batch_continuations_view.h"
#include "widgets/ledger_page.h"
#include "widgets/main_window.h"
#include "widgets/mismatch_strip.h"
#include "widgets/replay_summary_view.h"
#include "widgets/token_pane.h"
#include "widgets/trajectory_table_model.h"
#include "widgets/trajectory_view.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTest>
#include <qcustomplot.h>

namespace kvscope::widgets {
namespace {

using experiments::DeltaBasis;
using experiments::ItemRecord;

// Three trajectories of 4 tokens: max |delta| 2, 0.5 and none (not replayed); argmax mismatches at
// steps 2, none and -.
std::vector<ItemRecord> syntheticRun() {
    std::vector<ItemRecord> items(3);
    for (std::size_t k = 0; k < items.size(); ++k) {
        ItemRecord& item = items[k];
        item.itemId = "t" + std::to_string(k);
        item.index = static_cast<int64_t>(k);
        item.trajectories.prompt = {1, 2, 3};
        item.trajectories.output = {5, 6, 7, 8};
        experiments::EngineRecord& e = item.results.engine.emplace();
        e.engine = "vllm";
        e.dtype = "bf16";
        e.batchSize = k == 0 ? 8 : 1;
        e.logprobs = std::vector<double>{-1, -2, -0.5, -3};
    }
    items[0].results.replays["prefill/torch/bf16"] = {{-1, -2, -0.35, -5}, {1, 1, 1, 1}, {5, 6, 9, 8}, {1, 1, 2, 1}};
    items[0].results.replays["live/torch/bf16"] = {{-1, -2, -0.5, -3}, {1, 1, 1, 1}, {5, 6, 7, 8}, {1, 1, 1, 1}};
    items[1].results.replays["prefill/torch/bf16"] = {{-1, -2, -0.5, -2.5}, {1, 1, 1, 1}, {5, 6, 7, 8}, {1, 1, 1, 1}};
    return items;
}

QStringList strings(std::initializer_list<const char*> texts) {
    QStringList out;
    for (const char* t : texts) out << QString::fromUtf8(t);
    return out;
}

TEST(TrajectoryTable, PassesTheModelTesterAndSortsByMismatch) {
    TrajectoryTableModel model;
    QSortFilterProxyModel proxy;
    proxy.setSourceModel(&model);
    proxy.setSortRole(TrajectoryTableModel::SortRole);
    QAbstractItemModelTester t1(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    QAbstractItemModelTester t2(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
    model.setItems(syntheticRun(), {"prefill/torch/bf16", ""});
    ASSERT_EQ(model.rowCount(), 3);
    auto column = [&](int c) {
        QStringList out;
        for (int row = 0; row < proxy.rowCount(); ++row) out << proxy.index(row, c).data().toString();
        return out;
    };
    proxy.sort(TrajectoryTableModel::MaxAbsDeltaColumn, Qt::DescendingOrder);
    EXPECT_EQ(column(TrajectoryTableModel::IdColumn), strings({"t0", "t1", "t2"}));
    EXPECT_EQ(column(TrajectoryTableModel::MaxAbsDeltaColumn), strings({"2", "0.5", ""}));
    proxy.sort(TrajectoryTableModel::FirstArgmaxMismatchColumn, Qt::AscendingOrder);
    EXPECT_EQ(column(TrajectoryTableModel::IdColumn).front(), QStringLiteral("t0")) << "the only mismatch, step 2";
    EXPECT_EQ(column(TrajectoryTableModel::FirstArgmaxMismatchColumn), strings({"2", "none", "not replayed"}));
    EXPECT_EQ(proxy.index(0, TrajectoryTableModel::BatchSizeColumn).data().toInt(), 8);
    // Another basis: the same rows, new numbers (t0's prefill replay against its live one: 0.15 and 2).
    model.setBasis({"prefill/torch/bf16", "live/torch/bf16"});
    EXPECT_EQ(model.index(0, TrajectoryTableModel::MaxAbsDeltaColumn).data().toString(), QStringLiteral("2"));
    EXPECT_FALSE(model.index(1, TrajectoryTableModel::MaxAbsDeltaColumn).data().isValid()) << "t1 has no live replay";
    model.setItems({}, {});
}

TEST(ReplaySummary, OffersTheRunsReplaysAndCountsItsTokensByDecade) {
    ReplaySummaryView view;
    QSignalSpy changed(&view, &ReplaySummaryView::basisChanged);
    view.setItems(syntheticRun());
    ASSERT_EQ(view.replayBox()->count(), 2);
    EXPECT_EQ(view.basis().label, "live/torch/bf16") << "the first label, sorted";
    EXPECT_EQ(view.basis().against, "") << "against the engine";
    EXPECT_GE(changed.count(), 1);
    int64_t tokens = 0;
    for (const auto& bin : view.bins()) tokens += bin.tokens;
    EXPECT_EQ(tokens, 4) << "t0's live replay only";
    EXPECT_EQ(view.bins()[0].tokens, 4) << "equal to the engine everywhere";
    EXPECT_NE(view.summaryText().indexOf(QStringLiteral("3 trajectories, 12 output tokens")), -1)
        << view.summaryText().toStdString();

    view.setBasis({"prefill/torch/bf16", ""});
    EXPECT_EQ(view.basis().label, "prefill/torch/bf16");
    tokens = 0;
    for (const auto& bin : view.bins()) tokens += bin.tokens;
    EXPECT_EQ(tokens, 8);
    EXPECT_EQ(view.bins()[0].tokens, 5);
    EXPECT_EQ(view.bins()[experiments::deltaBinOf(0.5)].tokens, 2) << "0.15 and 0.5";
    EXPECT_EQ(view.bins()[experiments::deltaBinOf(2.0)].tokens, 1);
    EXPECT_EQ(view.plot()->plottableCount(), static_cast<int>(view.bins().size())) << "a bar per bin";
    // The against box offers the engine and the other replay, never the replay itself.
    ASSERT_EQ(view.againstBox()->count(), 2);
    const qsizetype before = changed.count();
    view.againstBox()->setCurrentIndex(1);
    EXPECT_EQ(changed.count(), before + 1);
    EXPECT_EQ(view.basis().against, "live/torch/bf16");
}

TEST(MismatchStrip, HoverAndClickNameTheStepUnderTheMouse) {
    MismatchStrip strip;
    strip.resize(400, 28);
    strip.show();
    strip.setDeltas({0.0, 1e-3, std::nullopt, 2.0}, 3, [](int step) { return QStringLiteral("step %1").arg(step); });
    EXPECT_EQ(strip.stepAt(strip.cellRect(2).center()), 2);
    EXPECT_EQ(strip.stepAt({-1, 5}), -1);
    EXPECT_EQ(strip.tooltipFor(1), QStringLiteral("step 1"));
    EXPECT_EQ(deltaColor(0.0), deltaBinColor(0));
    EXPECT_NE(deltaColor(2.0), deltaColor(1e-3)) << "decades apart, colours apart";
    QSignalSpy clicked(&strip, &MismatchStrip::stepClicked);
    QTest::mouseClick(&strip, Qt::LeftButton, Qt::NoModifier, strip.cellRect(3).center());
    ASSERT_EQ(clicked.count(), 1);
    EXPECT_EQ(clicked.at(0).at(0).toInt(), 3);
}

TEST(TrajectoryView, ShadesTheEnginesTokensAndAsksToLocateAClickedOne) {
    TrajectoryView view;
    view.resize(800, 500);
    view.show();
    view.showItem(syntheticRun()[0], {"prefill/torch/bf16", ""});
    const auto& cells = view.pane()->cells();
    ASSERT_EQ(cells.size(), 7u) << "3 prompt tokens, 4 output tokens";
    EXPECT_TRUE(cells[0].shade.isEmpty()) << "the prompt has no delta";
    EXPECT_EQ(cells[3].shade, deltaColor(0.0).name());
    EXPECT_TRUE(cells[5].highlighted) << "step 2: the first argmax mismatch";
    EXPECT_EQ(view.stepOfCell(6), 3);
    EXPECT_EQ(view.stepOfCell(1), -1);
    const QString tip = view.pane()->tooltipForCell(6);
    EXPECT_NE(tip.indexOf(QStringLiteral("|delta| 2")), -1) << tip.toStdString();
    EXPECT_NE(tip.indexOf(QStringLiteral("engine (vllm) logprob -3")), -1) << tip.toStdString();
    EXPECT_NE(tip.indexOf(QStringLiteral("live/torch/bf16")), -1) << "every replay's numbers";
    EXPECT_EQ(view.strip()->markedStep(), 2);
    EXPECT_NE(view.headerText().indexOf(QStringLiteral("first argmax mismatch at step 2")), -1);

    QSignalSpy locate(&view, &TrajectoryView::locateRequested);
    emit view.pane()->tokenClicked(6);
    ASSERT_EQ(locate.count(), 1);
    EXPECT_EQ(locate.at(0).at(0).toInt(), 3);
    EXPECT_NE(view.locationText().indexOf(QStringLiteral("prefill vs live")), -1) << view.locationText().toStdString();
    emit view.pane()->tokenClicked(1);
    EXPECT_EQ(locate.count(), 1) << "a prompt token has no step to locate";
    StepLocation found;
    found.itemId = QStringLiteral("t0");
    found.step = 3;
    found.references = QStringLiteral("prefill vs live");
    found.model = QStringLiteral("torch kernels, bf16");
    found.opsCompared = 40;
    found.differs = true;
    found.firstOp = QStringLiteral("layer 1 attn_output");
    view.showLocation(found);
    EXPECT_NE(view.locationText().indexOf(QStringLiteral("layer 1 attn_output")), -1);
    EXPECT_EQ(view.strip()->selectedStep(), 3);
}

class ImportedRunTest : public ::testing::Test {
protected:
    void SetUp() override {
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, QString::fromStdString(settingsDir_.path()));
    }
    test::TempDir settingsDir_, dir_;
};

// The whole path: a ledger with an imported run opens on its trajectories; a selected one shows its
// tokens as text; a clicked step is located on the model of the basis's replay, and the window says
// what experiments::locateReplayStep says on that model.
TEST_F(ImportedRunTest, OpensLikeAnyOtherRunAndLocatesAClickedStep) {
    const std::string path = dir_.file("imported.db");
    importedLedger(path);
    MainWindow window;
    window.resize(1400, 900);
    window.show();
    ASSERT_TRUE(window.openLedger(QString::fromStdString(path)));
    LedgerPage* page = window.ledgerPage();
    ASSERT_TRUE(page->showsImportedRun());
    ASSERT_EQ(page->trajectoryProxy()->rowCount(), 4);
    EXPECT_EQ(page->replaySummary()->replayBox()->count(), 2);
    const LedgerFixture& f = ledgerFixture();
    const ItemRecord& first = f.items.front();

    QSignalSpy shown(&window, &MainWindow::trajectoryShown);
    ASSERT_TRUE(window.selectItem(QString::fromStdString(first.itemId)));
    ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window.lastError().isEmpty(); }));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    EXPECT_TRUE(window.showsTrajectory());
    TrajectoryView* view = window.trajectoryView();
    const auto& cells = view->pane()->cells();
    ASSERT_EQ(cells.size(), first.trajectories.prompt.value().size() + 12);
    EXPECT_FALSE(cells.back().token.text.startsWith(QLatin1Char('#'))) << "the tokenizer's text, not the id";
    EXPECT_EQ(view->strip()->deltas().size(), 12u);

    const Transformer torchModel = Transformer::load(f.model, torch::kBFloat16, torch::kCPU);
    const ItemRecord stored = page->trajectoryModel()->record(page->trajectoryModel()->rowOfItem(view->itemId()));
    for (const std::string label : {"live/invariant/bf16", "prefill/torch/bf16"}) {
        page->replaySummary()->setBasis({label, ""});
        ASSERT_EQ(view->basis().label, label) << "the view follows the ledger page's basis";
        QSignalSpy located(&window, &MainWindow::stepLocated);
        QTest::mouseClick(view->strip(), Qt::LeftButton, Qt::NoModifier, view->strip()->cellRect(5).center());
        ASSERT_TRUE(waitFor([&] { return located.count() > 0 || !window.lastError().isEmpty(); })) << label;
        ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
        const QString text = view->locationText();
        EXPECT_TRUE(text.startsWith(QStringLiteral("Step 5, "))) << text.toStdString();
        if (label == "live/invariant/bf16") {
            EXPECT_NE(text.indexOf(QStringLiteral("live vs prefill (invariant kernels, bf16)")), -1)
                << text.toStdString();
            EXPECT_NE(text.indexOf(QStringLiteral("bit-equal")), -1) << "invariant kernels: one construction";
        } else {
            const LocatorReport r = experiments::locateReplayStep(torchModel, stored, 5, "prefill", "live");
            EXPECT_EQ(text.indexOf(QStringLiteral("first part at")) != -1, r.firstDifference.has_value())
                << text.toStdString();
            EXPECT_NE(text.indexOf(QStringLiteral("of %1 ops").arg(r.ops.size())) +
                          text.indexOf(QStringLiteral("all %1 ops").arg(r.ops.size())),
                      -2)
                << text.toStdString();
        }
    }
}

// The GUI reads an imported run's tokens and locates its steps only on the model it was imported
// with, checked as `kvscope replay` checks it: a model changed since is refused by name.
TEST_F(ImportedRunTest, AModelChangedSinceTheImportIsRefused) {
    const std::string model = dir_.file("model");
    std::filesystem::copy(ledgerFixture().model, model, std::filesystem::copy_options::recursive);
    const std::string path = dir_.file("moved.db");
    importedLedger(path, 1, model);
    { std::ofstream(model + "/model.safetensors", std::ios::app) << ' '; }  // other bytes, same place
    MainWindow window;
    window.show();
    ASSERT_TRUE(window.openLedger(QString::fromStdString(path)));
    ASSERT_TRUE(window.selectItem(QString::fromStdString(ledgerFixture().items.front().itemId)));
    ASSERT_TRUE(waitFor([&] { return !window.lastError().isEmpty(); }));
    EXPECT_NE(window.lastError().indexOf(QStringLiteral("not the model run")), -1) << window.lastError().toStdString();
}

TEST_F(ImportedRunTest, TheBatchProtocolsItemsShowEachSizesContinuationBesideAlone) {
    const std::string path = dir_.file("batch.db");
    batchLedger(dir_.path(), path);
    const experiments::Ledger ledger(path, experiments::LedgerAccess::ReadOnly);
    const std::vector<ItemRecord> items = ledger.items(ledger.runs().front().runId);
    const ItemRecord* item = nullptr;
    for (const ItemRecord& r : items)
        if (r.status == experiments::ItemStatus::Done && !item) item = &r;
    ASSERT_NE(item, nullptr) << "an item with a boundary";
    MainWindow window;
    window.resize(1400, 900);
    window.show();
    ASSERT_TRUE(window.openLedger(QString::fromStdString(path)));
    QSignalSpy shown(&window, &MainWindow::analysisShown);
    ASSERT_TRUE(window.selectItem(QString::fromStdString(item->itemId)));
    ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window.lastError().isEmpty(); }));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    const auto& panes = window.batchView()->panes();
    ASSERT_EQ(panes.size(), 4u) << "invariant and torch kernels, alone and a batch of 2";
    const std::vector<std::string> order = {"invariant/1", "invariant/2", "torch/1", "torch/2"};
    for (std::size_t k = 0; k < panes.size(); ++k) {
        const auto& ids = item->trajectories.batch.at("batch/" + order[k]);
        ASSERT_EQ(panes[k]->cells().size(), ids.size()) << order[k];
        for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(panes[k]->cells()[i].token.id, ids[i]) << order[k];
    }
    const auto& cell = item->results.batch->byKernels.at("torch").at(2);
    EXPECT_EQ(panes[3]->highlightedCell(), static_cast<int>(cell.firstDivergence.value_or(-1)));
    EXPECT_EQ(panes[1]->highlightedCell(), -1) << "invariant kernels: the batch changes nothing";

    // An item whose trace gave no boundary has no live/prefill to compare, but its batch sizes show.
    const std::string noBoundary = dir_.file("no-boundary.db");
    {
        experiments::Ledger out(noBoundary);
        const experiments::RunInfo run = ledger.runs().front();
        out.createRun(run.runId, run.manifest);
        ItemRecord copy = *item;
        copy.status = experiments::ItemStatus::NoBoundary;
        copy.results.trace->boundary.reset();
        copy.results.matched.reset();
        out.recordItem(run.runId, copy);
    }
    ASSERT_TRUE(window.openLedger(QString::fromStdString(noBoundary)));
    QSignalSpy again(&window, &MainWindow::analysisShown);
    ASSERT_TRUE(window.selectItem(QString::fromStdString(item->itemId)));
    ASSERT_TRUE(waitFor([&] { return again.count() > 0 || !window.lastError().isEmpty(); }));
    EXPECT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    EXPECT_EQ(window.batchView()->panes().size(), 4u);
}

}  // namespace
}  // namespace kvscope::widgets
