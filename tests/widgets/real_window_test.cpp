// SPDX-License-Identifier: MIT
// The main flows in a real window on a real X server (Xvfb; CTest starts it through xvfb-run),
// driven as a user drives them: synthetic mouse clicks, mouse moves and key presses delivered by the
// window system to the real widgets, with assertions on what the widgets then show. The offscreen
// suite (widgets_test.cpp) checks the same views' contents against the engine in depth; this one
// checks that a user can reach them.
#include "support/test_support.h"
#include "widgets_fixture.h"

#include "widgets/decode_compare_view.h"
#include "widgets/diff_color_map.h"
#include "widgets/item_table_model.h"
#include "widgets/kv_heatmap_view.h"
#include "widgets/layer_selection_model.h"
#include "widgets/ledger_page.h"
#include "widgets/main_window.h"
#include "widgets/transplant_panel.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QCheckBox>
#include <QDialog>
#include <QHeaderView>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>
#include <QToolTip>

#include <cstdio>
#include <cstdlib>

namespace kvscope::widgets {
namespace {

template <typename W>
W* childWithText(QWidget* parent, const QString& text) {
    for (W* w : parent->findChildren<W*>())
        if (w->text() == text) return w;
    return nullptr;
}

// The centre of a table row's first column, in its viewport's coordinates (where clicks go).
QPoint rowCentre(QTableView* table, int row) { return table->visualRect(table->model()->index(row, 0)).center(); }

class RealWindow : public ::testing::Test {
protected:
    void SetUp() override {
        window_.resize(1500, 950);
        window_.setProperty("noDialogs", true);  // an error goes to the status bar, not a modal box
        window_.show();
        ASSERT_TRUE(QTest::qWaitForWindowExposed(&window_)) << "no window on the X server";
        window_.activateWindow();
        ASSERT_TRUE(QTest::qWaitForWindowActive(&window_)) << "the window never became active";
    }
    MainWindow window_;
};

TEST_F(RealWindow, OpenALedgerFilterSelectHoverClickAndTransplantWithTheMouse) {
    const LedgerFixture& f = ledgerFixture();
    ASSERT_TRUE(window_.openLedger(QString::fromStdString(f.ledger)));
    LedgerPage* page = window_.ledgerPage();
    QTableView* table = page->itemView();
    ASSERT_EQ(table->model()->rowCount(), 12);

    // Empty states before anything is selected.
    EXPECT_TRUE(window_.heatmapView()->map()->showsEmptyState());
    EXPECT_NE(window_.heatmapView()->map()->emptyText().indexOf(QStringLiteral("select an item")), -1);

    // Columns fit their contents: no header section narrower than what it shows.
    for (int column = 0; column < table->model()->columnCount(); ++column) {
        if (table->isColumnHidden(column)) continue;
        int needed =
            table->fontMetrics().horizontalAdvance(table->model()->headerData(column, Qt::Horizontal).toString());
        for (int row = 0; row < table->model()->rowCount(); ++row)
            needed = std::max(
                needed, table->fontMetrics().horizontalAdvance(table->model()->index(row, column).data().toString()));
        EXPECT_GE(table->columnWidth(column), std::min(needed, 400))
            << "column " << table->model()->headerData(column, Qt::Horizontal).toString().toStdString()
            << " is cut off";
    }

    // Tick "Divergent only": the table keeps exactly the divergent items. Where this CPU and libtorch
    // split no item (test::noSplitHere) that leaves none, and a second click brings all back.
    int divergent = 0;
    for (const auto& r : f.items) divergent += item_results::divergent(r);
    QCheckBox* divergentOnly = childWithText<QCheckBox>(page, QStringLiteral("Divergent only"));
    ASSERT_NE(divergentOnly, nullptr);
    QTest::mouseClick(divergentOnly, Qt::LeftButton, Qt::NoModifier, divergentOnly->rect().center());
    ASSERT_TRUE(divergentOnly->isChecked()) << "the click reached the check box";
    ASSERT_EQ(table->model()->rowCount(), divergent);
    if (divergent == 0) {
        QTest::mouseClick(divergentOnly, Qt::LeftButton, Qt::NoModifier, divergentOnly->rect().center());
        ASSERT_EQ(table->model()->rowCount(), 12);
    }

    // Click the first row: the item is analysed and every view shows it.
    QSignalSpy shown(&window_, &MainWindow::analysisShown);
    QTest::mouseClick(table->viewport(), Qt::LeftButton, Qt::NoModifier, rowCentre(table, 0));
    ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window_.lastError().isEmpty(); }));
    ASSERT_TRUE(window_.lastError().isEmpty()) << window_.lastError().toStdString();
    EXPECT_EQ(window_.decodeView()->divergenceIndex() >= 0, divergent > 0) << "the panes show the ledger's verdict";
    DiffColorMap* map = window_.heatmapView()->map();
    EXPECT_FALSE(map->showsEmptyState());

    // Hover a cell inside the map (the edges lie on the axis rect's border): its tooltip lists it.
    map->replot();
    const int64_t layer = map->grid().rows / 2, position = map->grid().positions / 2;
    const QPoint cell(static_cast<int>(map->xAxis->coordToPixel(static_cast<double>(position))),
                      static_cast<int>(map->yAxis->coordToPixel(static_cast<double>(layer))));
    ASSERT_TRUE(map->cellAtPixel(cell).has_value());
    QTest::mouseMove(map, cell);
    ASSERT_TRUE(waitFor([&] { return QToolTip::isVisible(); }, 5000)) << "hovering a cell shows its numbers";
    EXPECT_NE(QToolTip::text().indexOf(QStringLiteral("layer %1, position %2").arg(layer).arg(position)), -1)
        << QToolTip::text().toStdString();

    // Click it: the heads pop-up opens, titled with the item, the layer, the metric and K/V.
    QTest::mouseClick(map, Qt::LeftButton, Qt::NoModifier, cell);
    QDialog* heads = nullptr;
    ASSERT_TRUE(waitFor([&] { return (heads = window_.heatmapView()->findChild<QDialog*>()) != nullptr; }, 5000));
    const QString title = heads->windowTitle();
    const QString item = table->model()->index(0, ItemTableModel::IdColumn).data().toString();
    EXPECT_TRUE(title.contains(item)) << title.toStdString();
    EXPECT_TRUE(title.contains(QStringLiteral("layer %1:").arg(layer))) << title.toStdString();
    EXPECT_TRUE(title.contains(QStringLiteral(" of K+V)")) || title.contains(QStringLiteral(" of K)")) ||
                title.contains(QStringLiteral(" of V)")))
        << title.toStdString();
    heads->close();

    // Run a transplant of every layer with the panel's button: the verdict is shown.
    TransplantPanel* panel = window_.transplantPanel();
    panel->layers()->selectAll();
    QPushButton* run = childWithText<QPushButton>(panel, QStringLiteral("Run transplant"));
    ASSERT_NE(run, nullptr);
    ASSERT_TRUE(run->isEnabled());
    QSignalSpy transplanted(&window_, &MainWindow::transplantShown);
    QTest::mouseClick(run, Qt::LeftButton, Qt::NoModifier, run->rect().center());
    ASSERT_TRUE(waitFor([&] { return transplanted.count() > 0 || !window_.lastError().isEmpty(); }));
    ASSERT_TRUE(window_.lastError().isEmpty()) << window_.lastError().toStdString();
    EXPECT_NE(panel->verdictText().indexOf(QStringLiteral("follows donor")), -1) << panel->verdictText().toStdString();
}

TEST_F(RealWindow, EscCancelsARunningBatch) {
    const LedgerFixture& f = ledgerFixture();
    test::TempDir dir;
    // The fixture's experiment with 1024 new tokens an item: seconds of work, so that the batch is
    // still running when the window sees it start (the fixture's 64 tokens finished all 12 items
    // before that, once, with other test processes busy on both cores).
    const std::string experiment = dir.file("long.toml");
    test::writeTextFile(experiment, "name = \"long\"\n[model]\ndir = \"" + f.model + "\"\n[dataset]\npath = \"" +
                                        test::testDataDir() +
                                        "/../../experiments/data/arith12.jsonl\"\n"
                                        "[generation]\nmax_new_tokens = 1024\nignore_eos = true\n[boundary]\n"
                                        "rule = \"fraction\"\nfraction = 0.5\n[protocols]\nrun = [\"matched\"]\n");
    QSignalSpy started(window_.worker(), &ModelWorker::started);
    QSignalSpy cancelled(&window_, &MainWindow::taskCancelled);
    QSignalSpy failed(&window_, &MainWindow::taskFailed);
    window_.runBatch(QString::fromStdString(experiment), QString::fromStdString(dir.file("batch.db")));
    ASSERT_TRUE(waitFor([&] { return started.count() > 0; }));
    // The spy sees `started` on the worker's thread; the window shows it busy once its queued slot
    // has run on this one (asserting at once failed under load: busy() still false).
    ASSERT_TRUE(waitFor([&] { return window_.busy(); }));
    QTest::keyClick(&window_, Qt::Key_Escape);
    ASSERT_TRUE(waitFor([&] { return cancelled.count() > 0 || failed.count() > 0; }));
    EXPECT_EQ(failed.count(), 0) << window_.lastError().toStdString();
    ASSERT_EQ(cancelled.count(), 1);
    EXPECT_EQ(window_.taskText(), QStringLiteral("batch run cancelled"));
    EXPECT_FALSE(window_.busy());
    // The window opens what the batch wrote, fewer than all 12 items.
    ASSERT_TRUE(
        waitFor([&] { return window_.ledgerPage()->ledgerPath() == QString::fromStdString(dir.file("batch.db")); }));
    EXPECT_LT(window_.ledgerPage()->itemModel()->rowCount(), 12);
}

}  // namespace
}  // namespace kvscope::widgets

int main(int argc, char** argv) {
    kvscope::widgets::reexecWithQuietThreads(argv);
    if (!std::getenv("DISPLAY")) {
        std::fprintf(stderr, "kvscope_window_tests needs an X server: run it under xvfb-run (CTest does)\n");
        return 1;
    }
    qputenv("QT_QPA_PLATFORM", "xcb");
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("kvscope-window-tests"));
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
