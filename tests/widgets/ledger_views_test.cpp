// SPDX-License-Identifier: MIT
// The ledger page's models and summary: every item model passes QAbstractItemModelTester, filters
// keep what they promise, and the summary strip and histograms count the fixture ledger's run.
#include "support/test_support.h"
#include "widgets_fixture.h"

#include "widgets/item_table_model.h"
#include "widgets/layer_selection_model.h"
#include "widgets/ledger_page.h"
#include "widgets/ledger_summary_view.h"
#include "widgets/run_table_model.h"

#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QTest>
#include <qcustomplot.h>

#include <algorithm>

namespace kvscope::widgets {
namespace {

TEST(ItemModels, PassTheModelTester) {
    ItemTableModel items;
    ItemFilterProxy proxy;
    proxy.setSourceModel(&items);
    QAbstractItemModelTester t1(&items, QAbstractItemModelTester::FailureReportingMode::Fatal);
    QAbstractItemModelTester t2(&proxy, QAbstractItemModelTester::FailureReportingMode::Fatal);
    items.setItems(ledgerFixture().items);
    ASSERT_EQ(items.rowCount(), 12);
    proxy.sort(ItemTableModel::FirstDivergenceColumn, Qt::DescendingOrder);
    proxy.setDivergentOnly(true);
    int divergent = 0;
    for (const auto& r : ledgerFixture().items) divergent += item_results::divergent(r);
    EXPECT_EQ(proxy.rowCount(), divergent);
    if (divergent > 0) {  // none where this CPU and libtorch split no item (test::noSplitHere)
        EXPECT_EQ(proxy.index(0, ItemTableModel::SuffixesEqualColumn).data().toString(), QStringLiteral("no"));
    }
    proxy.setDivergentOnly(false);
    proxy.setProtocol(QStringLiteral("transplant"));
    EXPECT_EQ(proxy.rowCount(), divergent) << "transplant runs on divergent items";
    proxy.setProtocol(QStringLiteral("no-such-protocol"));
    EXPECT_EQ(proxy.rowCount(), 0);
    proxy.setProtocol({});
    proxy.setFlippedOnly(true);
    EXPECT_LE(proxy.rowCount(), 4);
    items.setItems({});

    RunTableModel runs;
    QAbstractItemModelTester t3(&runs, QAbstractItemModelTester::FailureReportingMode::Fatal);
    runs.setRuns(experiments::Ledger(ledgerFixture().ledger).runs());
    EXPECT_EQ(runs.index(0, RunTableModel::NameColumn).data().toString(), QStringLiteral("tiny"));
    EXPECT_EQ(runs.index(0, RunTableModel::ItemsColumn).data().toInt(), 12);

    LayerSelectionModel layers;
    QAbstractItemModelTester t4(&layers, QAbstractItemModelTester::FailureReportingMode::Fatal);
    layers.setLayerCount(6);
    layers.selectSecondHalf();
    EXPECT_EQ(layers.layersWithKeys(), (std::vector<int64_t>{3, 4, 5}));
    EXPECT_TRUE(layers.setData(layers.index(0, LayerSelectionModel::ValuesColumn), Qt::Checked, Qt::CheckStateRole));
    EXPECT_EQ(layers.layersWithValues(), (std::vector<int64_t>{0, 3, 4, 5}));
    layers.selectNone();
    EXPECT_TRUE(layers.layersWithKeys().empty());
}

TEST(LedgerSummary, StripAndHistogramsCountTheRun) {
    const LedgerFixture& f = ledgerFixture();
    LedgerPage page;
    page.resize(1200, 900);
    page.show();
    page.openLedger(QString::fromStdString(f.ledger));
    LedgerSummaryView* summary = page.summaryView();
    int divergent = 0, withMargin = 0;
    for (const auto& r : f.items) {
        divergent += item_results::divergent(r);
        withMargin += item_results::measureOf(r, ItemMeasure::MarginAtDivergence).has_value();
    }
    EXPECT_NE(summary->summaryText().indexOf(QStringLiteral("suffixes differ %1 ").arg(divergent)), -1)
        << summary->summaryText().toStdString();
    EXPECT_NE(summary->summaryText().indexOf(QStringLiteral("CI [")), -1) << "the paired CI of the accuracy difference";
    auto total = [](const std::vector<HistogramBar>& bars) {
        int n = 0;
        for (const auto& b : bars) n += b.count;
        return n;
    };
    EXPECT_EQ(total(summary->bars(ItemMeasure::FirstDivergence)), divergent);
    EXPECT_EQ(total(summary->bars(ItemMeasure::MarginAtDivergence)), withMargin);

    // Empty state: a run where nothing diverged has no bars and says so.
    std::vector<experiments::ItemRecord> equal;
    for (const auto& r : f.items)
        if (!item_results::divergent(r)) equal.push_back(r);
    LedgerSummaryView empty;
    empty.setItems(equal);
    EXPECT_TRUE(empty.bars(ItemMeasure::FirstDivergence).empty());
    EXPECT_TRUE(empty.plot(ItemMeasure::MarginAtDivergence)->item(0)->visible());
    EXPECT_NE(empty.summaryText().indexOf(QStringLiteral("suffixes differ 0 ")), -1)
        << empty.summaryText().toStdString();
}

// The fixture ledger's run with its items rewritten: the even ones diverge, two at each of steps 3,
// 9 and 15, the odd ones do not. Its bars do not depend on whether this CPU's torch kernels split an
// item (on an AVX2-only Zen 3 none of the fixture's items diverges, which left the click untested).
std::string ledgerWithDivergentItems(const LedgerFixture& f, const test::TempDir& dir) {
    const experiments::Ledger source(f.ledger, experiments::LedgerAccess::ReadOnly);
    const experiments::RunInfo run = source.runs().front();
    const std::string path = dir.file("divergent.db");
    experiments::Ledger out(path);
    out.createRun(run.runId, run.manifest);
    for (experiments::ItemRecord item : f.items) {
        experiments::MatchedResult& m = item.results.matched.emplace();
        if (item.index % 2 == 0) {
            m.suffixEqual = false;
            m.firstDivergence = 3 + 6 * (item.index / 4);
            m.liveAtDivergence = experiments::StepSummary{1, 0.01 * static_cast<double>(item.index + 1), 0, 0};
            m.prefillAtDivergence = experiments::StepSummary{2, 0.02, 0, 0};
        }
        out.recordItem(run.runId, item);
    }
    return path;
}

TEST(LedgerSummary, ABarClickFiltersTheTableToItsItems) {
    const LedgerFixture& f = ledgerFixture();
    test::TempDir dir;
    LedgerPage page;
    page.resize(1200, 900);
    page.show();
    page.openLedger(QString::fromStdString(ledgerWithDivergentItems(f, dir)));
    LedgerSummaryView* summary = page.summaryView();
    EXPECT_NE(summary->summaryText().indexOf(QStringLiteral("suffixes differ 6 ")), -1)
        << summary->summaryText().toStdString();
    ASSERT_EQ(page.itemProxy()->rowCount(), 12);
    // Click the tallest first-divergence bar with the mouse: the table lists exactly its items.
    const auto& bars = summary->bars(ItemMeasure::FirstDivergence);
    const auto tallest = std::max_element(bars.begin(), bars.end(), [](auto& a, auto& b) { return a.count < b.count; });
    ASSERT_EQ(tallest->count, 2) << "two items at each divergence step";
    QCustomPlot* plot = summary->plot(ItemMeasure::FirstDivergence);
    plot->replot();
    const QPoint onBar(static_cast<int>(plot->xAxis->coordToPixel((tallest->lower + tallest->upper) / 2)),
                       static_cast<int>(plot->yAxis->coordToPixel(tallest->count / 2.0)));
    QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, onBar);
    ASSERT_TRUE(page.itemProxy()->range().active) << "the click reached the bar";
    EXPECT_EQ(page.itemProxy()->rowCount(), tallest->count);
    for (int row = 0; row < page.itemProxy()->rowCount(); ++row) {
        const int step = page.itemProxy()->index(row, ItemTableModel::FirstDivergenceColumn).data().toInt();
        EXPECT_GE(step, tallest->lower);
        EXPECT_LT(step, tallest->upper);
    }
    QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, onBar);
    EXPECT_FALSE(page.itemProxy()->range().active) << "a second click clears the filter";
    EXPECT_EQ(page.itemProxy()->rowCount(), 12);
}

TEST(LedgerSummary, ABarsRangeHoldsItsItemsOnly) {
    std::vector<experiments::ItemRecord> items;
    for (const double margin : {0.0, 0.5, 2.0}) {
        experiments::ItemRecord r;
        experiments::MatchedResult m;
        m.suffixEqual = false;
        m.firstDivergence = 1;
        m.liveAtDivergence = experiments::StepSummary{0, margin, 0, 0};
        r.results.matched = m;
        items.push_back(r);
    }
    const auto margins = histogramOf(items, ItemMeasure::MarginAtDivergence, 4);
    ItemRange r{true, ItemMeasure::MarginAtDivergence, margins[3].lower, margins[3].upper};
    EXPECT_TRUE(r.contains(items[2]));
    EXPECT_FALSE(r.contains(items[1]));
    EXPECT_FALSE(r.contains(items[0]));
}

}  // namespace
}  // namespace kvscope::widgets
