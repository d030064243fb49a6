// SPDX-License-Identifier: MIT
// The desktop application under QT_QPA_PLATFORM=offscreen: the views show what a ledger made by the
// experiment engine says (divergence index, heatmap size and cell values, transplant verdict); the
// event loop keeps turning while the worker decodes; bad input becomes a message; the window can be
// saved as a picture. The ledger page's models and summary are in ledger_views_test.cpp.
// libtorch's headers come before any Qt header: Qt's `slots` / `signals` keyword macros would
// otherwise rewrite identifiers inside them (c10::ivalue::Object::slots()).
#include "experiments/runner.h"

#include "core/cache/cache_diff.h"
#include "core/cache/constructions.h"
#include "core/model/transformer.h"

#include "support/smollm2_study.h"
#include "support/test_support.h"
#include "widgets_fixture.h"

#include "widgets/decode_compare_view.h"
#include "widgets/diff_color_map.h"
#include "widgets/heatmap_data.h"
#include "widgets/item_table_model.h"
#include "widgets/kv_heatmap_view.h"
#include "widgets/layer_selection_model.h"
#include "widgets/ledger_page.h"
#include "widgets/ledger_summary_view.h"
#include "widgets/main_window.h"
#include "widgets/run_table_model.h"
#include "widgets/session_page.h"
#include "widgets/token_pane.h"
#include "widgets/transplant_panel.h"

#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTest>
#include <QTimer>
#include <QUrl>
#include <qcustomplot.h>

#include <atomic>
#include <filesystem>
#include <iostream>

namespace kvscope::widgets {
namespace {

CacheDiff syntheticDiff() {
    CacheDiff d;
    d.layers = 2, d.heads = 2, d.positions = 5, d.headDim = 4;
    const std::size_t n = 2 * 2 * 5;
    for (DiffGrid* g : {&d.keys, &d.values}) {
        g->maxAbs.assign(n, 0.f), g->meanAbs.assign(n, 0.f), g->relL2.assign(n, 0.f), g->differing.assign(n, 0);
    }
    d.keys.maxAbs[d.at(1, 0, 3)] = 0.5f;
    d.keys.maxAbs[d.at(1, 1, 3)] = 0.25f;
    d.values.maxAbs[d.at(1, 1, 3)] = 0.75f;
    d.keys.differing[d.at(1, 0, 3)] = 2;
    d.values.differing[d.at(1, 1, 3)] = 4;
    d.keys.relL2[d.at(0, 0, 1)] = 0.3f;
    d.keys.relL2[d.at(0, 1, 1)] = 0.4f;
    return d;
}

TEST(HeatmapData, ReducesHeadsAndKeepsMaximaWhenDownsampling) {
    const CacheDiff d = syntheticDiff();
    EXPECT_DOUBLE_EQ(layerGrid(d, DiffMetric::MaxAbs, KvComponent::Keys).value(1, 3), 0.5);
    EXPECT_DOUBLE_EQ(layerGrid(d, DiffMetric::MaxAbs, KvComponent::Both).value(1, 3), 0.75);
    EXPECT_DOUBLE_EQ(layerGrid(d, DiffMetric::DifferingFraction, KvComponent::Both).value(1, 3), 6.0 / 16.0);
    EXPECT_NEAR(layerGrid(d, DiffMetric::RelativeL2, KvComponent::Keys).value(0, 1), std::sqrt((0.09 + 0.16) / 2),
                1e-6);
    EXPECT_DOUBLE_EQ(headGrid(d, 1, DiffMetric::MaxAbs, KvComponent::Values).value(1, 3), 0.75);
    const HeatmapGrid full = layerGrid(d, DiffMetric::MaxAbs, KvComponent::Both);
    const DisplayGrid shown = downsampleForDisplay(full, 2);
    EXPECT_EQ(shown.grid.positions, 2);
    EXPECT_DOUBLE_EQ(shown.grid.value(1, 1), 0.75) << "a single hot position survives downsampling";
    EXPECT_EQ(gridCsv(full, "layer").substr(0, 19), "layer,p0,p1,p2,p3,p");
}

TEST(HeatmapView, LargeGridsStayExactUnderTheMouse) {
    // 64 layers x 8192 positions: drawn with at most 2048 columns, hover values from the full grid.
    CacheDiff d;
    d.layers = 64, d.heads = 1, d.positions = 8192, d.headDim = 1;
    const std::size_t n = 64 * 8192;
    for (DiffGrid* g : {&d.keys, &d.values}) {
        g->maxAbs.assign(n, 0.f), g->meanAbs.assign(n, 0.f), g->relL2.assign(n, 0.f), g->differing.assign(n, 0);
    }
    d.keys.maxAbs[d.at(40, 0, 5001)] = 2.0f;
    d.bitExact = false;
    d.firstDifference = std::make_pair<int64_t, int64_t>(40, 5001);
    KvHeatmapView view;
    view.resize(1200, 700);
    view.show();
    // Before any comparison: a sentence saying what to do, not an empty map with made-up axes.
    EXPECT_TRUE(view.map()->showsEmptyState());
    EXPECT_TRUE(view.map()->emptyText().startsWith(QStringLiteral("No comparison yet")))
        << view.map()->emptyText().toStdString();
    EXPECT_FALSE(view.map()->xAxis->visible());
    QElapsedTimer t;
    t.start();
    view.setDiff(d, QStringLiteral("big"));
    view.map()->replot();  // the queued replot, drawn now so the time includes painting
    const qint64 ms = t.elapsed();
    EXPECT_LT(ms, 5000) << "64 x 8192 cells should render interactively";
    std::cout << "64 layers x 8192 positions: setDiff + draw in " << ms << " ms\n";
    EXPECT_FALSE(view.map()->showsEmptyState());
    EXPECT_TRUE(view.map()->xAxis->visible());
    EXPECT_EQ(view.map()->displayed().grid.positions, 2048);
    EXPECT_EQ(view.map()->grid().positions, 8192);
    EXPECT_DOUBLE_EQ(view.map()->grid().value(40, 5001), 2.0);
    QCustomPlot* plot = view.map();
    plot->replot();
    const QPoint pixel(static_cast<int>(plot->xAxis->coordToPixel(5001)),
                       static_cast<int>(plot->yAxis->coordToPixel(40)));
    const auto cell = view.map()->cellAtPixel(pixel);
    ASSERT_TRUE(cell.has_value());
    EXPECT_EQ(cell->row, 40);
    const double positionsPerPixel = 8192.0 / plot->axisRect()->width();
    EXPECT_NEAR(static_cast<double>(cell->position), 5001.0, positionsPerPixel + 1);  // the mouse resolves one pixel
    EXPECT_DOUBLE_EQ(cell->value, view.map()->grid().value(40, cell->position))
        << "hover shows the full-resolution value";
    test::TempDir dir;
    for (const char* ext : {"png", "pdf", "csv"}) {
        const QString path = QString::fromStdString(dir.file(std::string("map.") + ext));
        EXPECT_TRUE(view.exportTo(path)) << ext;
        EXPECT_GT(QFileInfo(path).size(), 100) << ext;
    }
}

class MainWindowTest : public ::testing::Test {
protected:
    void SetUp() override {
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, QString::fromStdString(settingsDir_.path()));
    }
    test::TempDir settingsDir_;
};

TEST_F(MainWindowTest, ShowsWhatTheLedgerSaysForTheSelectedItem) {
    const LedgerFixture& f = ledgerFixture();
    MainWindow window;
    window.resize(1400, 900);
    window.show();
    ASSERT_TRUE(window.openLedger(QString::fromStdString(f.ledger)));
    EXPECT_EQ(window.ledgerPage()->itemModel()->rowCount(), 12);
    int divergentShown = 0;
    for (const auto& record : f.items) {
        if (record.status != experiments::ItemStatus::Done) continue;
        const bool divergent = item_results::divergent(record);
        divergentShown += divergent;
        QSignalSpy shown(&window, &MainWindow::analysisShown);
        ASSERT_TRUE(window.selectItem(QString::fromStdString(record.itemId)));
        ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window.lastError().isEmpty(); })) << record.itemId;
        ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();

        // The decode panes: the divergence index is the ledger's, highlighted in both panes.
        const int ledgerDivergence = item_results::firstDivergence(record);
        EXPECT_EQ(window.decodeView()->divergenceIndex(), ledgerDivergence) << record.itemId;
        const auto& suffix = record.trajectories.suffixLive.value();
        const auto& prefixCells = window.decodeView()->livePane()->cells();
        const std::size_t prefixLength = prefixCells.size() - suffix.size();
        for (std::size_t i = 0; i < suffix.size(); ++i) ASSERT_EQ(prefixCells[prefixLength + i].token.id, suffix[i]);
        if (ledgerDivergence >= 0) {
            EXPECT_EQ(window.decodeView()->livePane()->highlightedCell(),
                      static_cast<int>(prefixLength) + ledgerDivergence);
            EXPECT_EQ(window.decodeView()->prefillPane()->highlightedCell(),
                      static_cast<int>(prefixLength) + ledgerDivergence);
            EXPECT_NE(window.decodeView()
                          ->livePane()
                          ->tooltipForCell(static_cast<int>(prefixLength) + ledgerDivergence)
                          .indexOf(QStringLiteral("margin")),
                      -1);
        }

        // The heatmap: layers x prefix positions, values equal to an independent rebuild of the caches.
        const Transformer model = Transformer::load(f.model, torch::kBFloat16, torch::kCPU);
        const auto& prompt = record.trajectories.prompt.value();
        const int64_t boundary = record.results.trace.value().boundary.value();
        const KvCache live = buildLiveCache(model, prompt, boundary);
        const KvCache prefill =
            buildCache(model, live.ids(), Construction::parse("prefill"), static_cast<int64_t>(prompt.size()));
        const CacheDiff expected = diffCaches(live, prefill);
        KvHeatmapView* heatmap = window.heatmapView();
        heatmap->setMetric(DiffMetric::MaxAbs);
        heatmap->setComponent(KvComponent::Keys);
        const HeatmapGrid& grid = heatmap->map()->grid();
        ASSERT_EQ(grid.rows, model.config().numLayers);
        ASSERT_EQ(grid.positions, static_cast<int64_t>(live.length()));
        const int64_t p = live.length() - 1, l = model.config().numLayers - 1;
        double want = 0;
        for (int64_t h = 0; h < expected.heads; ++h)
            want = std::max(want, static_cast<double>(expected.keys.maxAbs[expected.at(l, h, p)]));
        EXPECT_DOUBLE_EQ(grid.value(l, p), want);
        EXPECT_NE(heatmap->describeCell(l, p).indexOf(QString::number(want, 'g', 5)), -1)
            << heatmap->describeCell(l, p).toStdString();
        EXPECT_FALSE(heatmap->map()->showsEmptyState());
        QWidget* heads = heatmap->openHeadBreakdown(l);
        ASSERT_NE(heads, nullptr);
        // The pop-up says what it shows: the comparison (item), the layer, the metric and K or V.
        const QString title = heads->windowTitle();
        EXPECT_TRUE(title.startsWith(heatmap->title()) && !heatmap->title().isEmpty()) << title.toStdString();
        EXPECT_TRUE(title.contains(QStringLiteral("layer %1:").arg(l))) << title.toStdString();
        EXPECT_TRUE(
            title.contains(QStringLiteral("(%1 of K)").arg(QString::fromLatin1(metricName(DiffMetric::MaxAbs)))))
            << title.toStdString();
        EXPECT_EQ(heads->findChild<DiffColorMap*>()->grid().rows, model.config().numKvHeads);
        heads->close();

        // Transplanting every layer makes the recipient follow its donor (the study's 24/24).
        for (const bool intoPrefill : {true, false}) {
            QSignalSpy transplanted(&window, &MainWindow::transplantShown);
            window.transplantPanel()->setDirectionIntoPrefill(intoPrefill);
            window.transplantPanel()->layers()->selectAll();
            window.transplantPanel()->run();
            ASSERT_TRUE(waitFor([&] { return transplanted.count() > 0 || !window.lastError().isEmpty(); }));
            EXPECT_NE(window.transplantPanel()->verdictText().indexOf(QStringLiteral("follows donor")), -1)
                << window.transplantPanel()->verdictText().toStdString();
            EXPECT_TRUE(window.decodeView()->transplantPane()->isVisible());
        }
        window.transplantPanel()->layers()->selectNone();
        QSignalSpy none(&window, &MainWindow::transplantShown);
        window.transplantPanel()->setDirectionIntoPrefill(true);
        window.transplantPanel()->run();
        ASSERT_TRUE(waitFor([&] { return none.count() > 0; }));
        const QString expectNone =
            ledgerDivergence < 0 ? QStringLiteral("follows donor") : QStringLiteral("follows recipient");
        EXPECT_NE(window.transplantPanel()->verdictText().indexOf(expectNone), -1)
            << window.transplantPanel()->verdictText().toStdString();

        if (!divergent) continue;
        // The localize preset selects exactly the ledger's sufficient layers.
        if (record.results.localize && record.results.localize->found) {
            window.transplantPanel()->applyLocalizePreset();
            const std::vector<int64_t> layers = record.results.localize->layers;
            const KvParts parts = record.results.localize->parts;
            EXPECT_EQ(window.transplantPanel()->layers()->layersWithKeys(),
                      parts == KvParts::Values ? std::vector<int64_t>{} : layers);
            EXPECT_EQ(window.transplantPanel()->layers()->layersWithValues(),
                      parts == KvParts::Keys ? std::vector<int64_t>{} : layers);
        }
        // Any two constructions: live vs token-by-token after the prompt is the bridge, bit for bit.
        QSignalSpy compared(&window, &MainWindow::analysisShown);
        window.decodeView()->setSides({QStringLiteral("live"), {}, {}}, {QStringLiteral("incremental"), {}, {}});
        window.decodeView()->requestCompare();
        ASSERT_TRUE(waitFor([&] { return compared.count() > 0 || !window.lastError().isEmpty(); }));
        ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
        EXPECT_TRUE(window.heatmapView()->diff().bitExact);
        EXPECT_EQ(window.decodeView()->divergenceIndex(), -1);
        EXPECT_NE(window.decodeView()->prefillPane()->cells().size(), 0u);
        // Different precisions: continuations compared, no element-wise diff (and no crash).
        QSignalSpy mixed(&window, &MainWindow::analysisShown);
        window.decodeView()->setSides({QStringLiteral("prefill"), QStringLiteral("bf16"), {}},
                                      {QStringLiteral("prefill"), QStringLiteral("fp32"), {}});
        window.decodeView()->requestCompare();
        ASSERT_TRUE(waitFor([&] { return mixed.count() > 0 || !window.lastError().isEmpty(); }));
        ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
        EXPECT_EQ(window.heatmapView()->diff().layers, 0);
        // The remedy on this very item: with invariant kernels, live and one-shot prefill are the
        // same bits and continue alike, where the run's torch kernels split them.
        QSignalSpy remedied(&window, &MainWindow::analysisShown);
        window.decodeView()->setSides({QStringLiteral("live"), {}, QStringLiteral("invariant")},
                                      {QStringLiteral("prefill"), {}, QStringLiteral("invariant")});
        window.decodeView()->requestCompare();
        ASSERT_TRUE(waitFor([&] { return remedied.count() > 0 || !window.lastError().isEmpty(); }));
        ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
        EXPECT_TRUE(window.heatmapView()->diff().bitExact);
        EXPECT_EQ(window.decodeView()->divergenceIndex(), -1);
        break;  // one divergent item exercises the comparison controls
    }
    if (divergentShown == 0) GTEST_SKIP() << test::noSplitHere("no item of the fixture ledger diverges");
}

TEST_F(MainWindowTest, BadInputBecomesAMessageNotACrash) {
    MainWindow window;
    test::TempDir dir;
    QString error;
    EXPECT_FALSE(window.openLedger(QString::fromStdString(dir.file("missing.db")), &error));
    EXPECT_NE(error.indexOf(QStringLiteral("missing.db")), -1) << error.toStdString();
    test::writeTextFile(dir.file("garbage.db"), "this is not sqlite");
    EXPECT_FALSE(window.openLedger(QString::fromStdString(dir.file("garbage.db")), &error));
    EXPECT_NE(error.indexOf(QStringLiteral("garbage.db")), -1) << error.toStdString();
    EXPECT_FALSE(window.openPath(QString::fromStdString(dir.path()), &error));
    EXPECT_NE(error.indexOf(QStringLiteral("config.json")), -1);
    QSignalSpy failed(&window, &MainWindow::taskFailed);
    window.sessionPage()->setModelDir(QString::fromStdString(dir.path()));
    window.openModel(QString::fromStdString(dir.path()));
    ASSERT_TRUE(waitFor([&] { return failed.count() > 0; }));
    EXPECT_NE(failed.front().front().toString().indexOf(QStringLiteral("config.json")), -1)
        << failed.front().front().toString().toStdString();
    EXPECT_FALSE(window.selectItem(QStringLiteral("nope")));
}

TEST_F(MainWindowTest, AHeatmapExportThatCannotBeWrittenIsReported) {
    MainWindow window;
    test::TempDir dir;
    const QString unwritable = QString::fromStdString(dir.file("no-such-folder/map.png"));
    EXPECT_FALSE(window.heatmapView()->exportTo(unwritable));
    emit window.heatmapView()->exportFailed(QStringLiteral("Could not write %1").arg(unwritable));
    EXPECT_NE(window.lastError().indexOf(unwritable), -1) << "export errors reach the window, not silence";
}

TEST_F(MainWindowTest, EventLoopTurnsWhileTheWorkerDecodesAndCancelStopsIt) {
    static test::TempDir dir;
    RandomCheckpointSpec spec = test::tinySpec("qwen2");
    spec.hiddenSize = 256, spec.numLayers = 6, spec.intermediateSize = 768, spec.numHeads = 8, spec.numKvHeads = 2;
    spec.maxPositionEmbeddings = 8192;
    writeRandomCheckpoint(spec, dir.file("model"));
    MainWindow window;
    window.show();
    QSignalSpy opened(window.worker(), &ModelWorker::modelOpened);
    window.openModel(QString::fromStdString(dir.file("model")));
    ASSERT_TRUE(waitFor([&] { return opened.count() > 0; }));

    // Decode many tokens; a 10 ms timer must keep firing meanwhile.
    int ticks = 0;
    QTimer timer;
    QObject::connect(&timer, &QTimer::timeout, [&] { ++ticks; });
    timer.start(10);
    QSignalSpy decoded(window.worker(), &ModelWorker::sessionDecoded);
    QSignalSpy streamed(window.worker(), &ModelWorker::tokenDecoded);
    window.sessionPage()->setPrompt(QStringLiteral("The model thinks"));
    QElapsedTimer t;
    t.start();
    window.sessionPage()->requestDecode();
    ASSERT_TRUE(waitFor([&] { return decoded.count() > 0 || !window.lastError().isEmpty(); }));
    const qint64 elapsed = t.elapsed();
    EXPECT_GT(streamed.count(), 10);
    EXPECT_GE(ticks, elapsed / 40) << "timer ticks " << ticks << " in " << elapsed << " ms: the GUI thread was blocked";

    // The spy hears sessionDecoded in the worker's thread; the page gets the queued copy a moment later.
    ASSERT_TRUE(waitFor([&] { return window.sessionPage()->boundary() > 0; })) << "the page shows the finished decode";

    // The session's whole study on one item: set the boundary, compare.
    QSignalSpy shown(&window, &MainWindow::analysisShown);
    // Clicking the 10th generated token puts the boundary after it.
    const int promptLength = static_cast<int>(decoded.front().front().value<SessionDecode>().prompt.size());
    emit window.sessionPage()->livePane()->anchorClicked(QUrl(QStringLiteral("#t%1").arg(promptLength + 9)));
    ASSERT_EQ(window.sessionPage()->boundary(), 10);
    window.sessionPage()->requestCompare();
    ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window.lastError().isEmpty(); }));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    EXPECT_EQ(window.heatmapView()->diff().positions,
              static_cast<int64_t>(window.sessionPage()->livePane()->cells().size() -
                                   (decoded.front().front().value<SessionDecode>().trace.size() - 10)));

    // A newer comparison supersedes the one asked for before it (queued or running): the first
    // ends as cancelled, only the second reaches the views.
    QSignalSpy cancelledJobs(window.worker(), &ModelWorker::cancelled);
    QSignalSpy failed(&window, &MainWindow::taskFailed);
    const int shownBefore = shown.count();
    window.sessionPage()->requestCompare();
    const quint64 firstCompare = window.jobs().lastIssued();
    window.sessionPage()->requestCompare();
    const quint64 secondCompare = window.jobs().lastIssued();
    ASSERT_TRUE(waitFor([&] { return shown.count() > shownBefore || failed.count() > 0; }));
    ASSERT_EQ(failed.count(), 0) << window.lastError().toStdString();
    EXPECT_EQ(shown.count(), shownBefore + 1);
    EXPECT_TRUE(window.jobs().isCurrent(JobKind::Analysis, secondCompare));
    ASSERT_EQ(cancelledJobs.count(), 1);
    EXPECT_EQ(cancelledJobs.front().front().value<quint64>(), firstCompare);

    // Cancel (Esc's action) on a long decode: it ends as cancelled, not as a failure: no error, the
    // status bar says so, the window is idle again.
    QSignalSpy cancelledTasks(&window, &MainWindow::taskCancelled);
    window.sessionPage()->requestDecode();
    QTimer::singleShot(50, &window, &MainWindow::cancelAll);
    ASSERT_TRUE(waitFor([&] { return cancelledTasks.count() > 0 || decoded.count() > 1; }, 30000));
    ASSERT_EQ(cancelledTasks.count(), 1) << "the decode finished before the cancel";
    EXPECT_EQ(failed.count(), 0);
    EXPECT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    EXPECT_EQ(window.taskText(), QStringLiteral("decode cancelled"));
    EXPECT_FALSE(window.busy());
}

// SmolLM2 as the GUI gets it: the GGUF file opened by its path (as the command line and recent files
// give it), then a ledger of its study (experiments/smollm2.toml on one item, 24 new tokens): the
// decode panes show the chat template's markers as special tokens, the heatmap all 30 layers over
// the whole prefix.
TEST_F(MainWindowTest, ARealModelFromItsGgufFileAndFromItsStudysLedger) {
    const std::string gguf = test::smollm2Gguf();
    if (gguf.empty()) GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch-test-data.sh --smollm2 PYTHON)";
    test::TempDir dir;
    test::writeSmolLM2Experiment(
        dir.file("smollm2.toml"),
        {{"catalog = \"smollm2\"", "dir = \"" + gguf + "\""},
         {"max_new_tokens = 320", "max_new_tokens = 24"},
         {"run = [\"matched\", \"fixed_prefix_2x2\", \"bridge\", \"audit\", \"transplant\", \"localize\"]",
          "run = [\"matched\"]"}});
    experiments::RunOptions options;
    options.ledgerPath = dir.file("s.db");
    options.onlyItems = {"wp-000"};
    const std::atomic<bool> stop{false};
    experiments::runExperiment(
        experiments::ExperimentConfig::load(dir.file("smollm2.toml")), options, [](const experiments::RunProgress&) {},
        stop);

    MainWindow window;
    window.resize(1600, 1000);
    window.show();
    QSignalSpy opened(window.worker(), &ModelWorker::modelOpened);
    ASSERT_TRUE(window.openPath(QString::fromStdString(gguf)));
    ASSERT_TRUE(waitFor([&] { return opened.count() > 0 || !window.lastError().isEmpty(); }, 60000));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();

    ASSERT_TRUE(window.openLedger(QString::fromStdString(options.ledgerPath)));
    QSignalSpy shown(&window, &MainWindow::analysisShown);
    ASSERT_TRUE(window.selectItem(QStringLiteral("wp-000")));
    ASSERT_TRUE(waitFor([&] { return shown.count() > 0 || !window.lastError().isEmpty(); }, 120000));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    const auto& cells = window.decodeView()->livePane()->cells();
    int special = 0;
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const TokenCell& c = cells[i];
        EXPECT_EQ(c.token.special, c.token.text.startsWith(QStringLiteral("<|im_"))) << c.token.text.toStdString();
        if (c.token.special && !c.highlighted) {
            EXPECT_NE(cellStyle(c, i).indexOf(QStringLiteral("#1a5fb4")), -1);
        }
        special += c.token.special;
    }
    EXPECT_GE(special, 5) << "<|im_start|> and <|im_end|> around the system and user turns, <|im_start|> before "
                             "the answer";
    for (std::size_t i = 1; i < 4; i += 2)  // the prefix's tokens are told apart too
        if (!cells[i].token.special) {
            EXPECT_NE(cellStyle(cells[i], i).indexOf(QStringLiteral("rgba(128,128,128")), -1);
        }
    const HeatmapGrid& grid = window.heatmapView()->map()->grid();
    EXPECT_EQ(grid.rows, 30);
    EXPECT_EQ(grid.positions, window.heatmapView()->diff().positions);
    EXPECT_GT(grid.positions, 100) << "the prompt through its chat template is over 100 tokens";
}

// Every request gets the next id; only a request that replaces what the views show supersedes the
// open one of its kind.
TEST(JobTracker, IdsGrowAcrossKindsAndANewerRequestSupersedesTheOpenOneOfItsKind) {
    JobTracker jobs;
    const auto analysis = jobs.start(JobKind::Analysis);
    const auto decode = jobs.start(JobKind::Decode);
    EXPECT_EQ(analysis.job, 1u);
    EXPECT_EQ(decode.job, 2u);
    EXPECT_EQ(analysis.superseded, 0u);
    EXPECT_EQ(decode.superseded, 0u) << "another kind is not superseded";
    const auto newerAnalysis = jobs.start(JobKind::Analysis);
    EXPECT_EQ(newerAnalysis.superseded, analysis.job);
    EXPECT_FALSE(jobs.isCurrent(JobKind::Analysis, analysis.job));
    EXPECT_TRUE(jobs.isCurrent(JobKind::Analysis, newerAnalysis.job));
    EXPECT_TRUE(jobs.isCurrent(JobKind::Decode, decode.job));
    EXPECT_FALSE(jobs.isCurrent(JobKind::Transplant, decode.job));

    jobs.close(decode.job);
    EXPECT_EQ(jobs.start(JobKind::Decode).superseded, 0u) << "a finished job has nothing to cancel";
    const auto batch = jobs.start(JobKind::Batch);
    EXPECT_EQ(jobs.start(JobKind::Batch).superseded, 0u) << "a second batch queues behind the first";
    EXPECT_EQ(jobs.start(JobKind::OpenModel).superseded, 0u);
    EXPECT_EQ(jobs.lastIssued(), 7u);
    EXPECT_TRUE(jobs.anyOpen());
    for (quint64 job = 1; job <= jobs.lastIssued(); ++job) jobs.close(job);
    EXPECT_FALSE(jobs.anyOpen());
    EXPECT_FALSE(jobs.isCurrent(JobKind::Batch, batch.job));
}

TEST_F(MainWindowTest, RemembersThemeRecentFilesAndLastLedger) {
    const LedgerFixture& f = ledgerFixture();
    {
        MainWindow window;
        ASSERT_TRUE(window.openLedger(QString::fromStdString(f.ledger)));
        window.setDarkTheme(true);
        window.close();
    }
    QSettings settings;
    EXPECT_EQ(settings.value(QStringLiteral("lastLedger")).toString(), QString::fromStdString(f.ledger));
    EXPECT_TRUE(settings.value(QStringLiteral("darkTheme")).toBool());
    EXPECT_EQ(settings.value(QStringLiteral("recentFiles")).toStringList().front(), QString::fromStdString(f.ledger));
    EXPECT_FALSE(settings.value(QStringLiteral("windowState")).toByteArray().isEmpty());
    MainWindow again;  // restores the dark palette
    EXPECT_LT(qApp->palette().color(QPalette::Window).lightness(), 100);
    again.setDarkTheme(false);
}

TEST_F(MainWindowTest, BatchRunFromTheWindowWritesTheLedgerTheCliWrites) {
    const LedgerFixture& f = ledgerFixture();
    test::TempDir dir;
    // Two items of the fixture's experiment, once through the window's worker, once through the CLI.
    std::string toml = test::readTextFile(f.experiment);
    const std::string datasetLine =
        toml.substr(toml.find("path = "), toml.find('\n', toml.find("path = ")) - toml.find("path = "));
    std::string lines = test::readTextFile(test::testDataDir() + "/../../experiments/data/arith12.jsonl");
    lines = lines.substr(0, lines.find('\n', lines.find('\n') + 1) + 1);
    test::writeTextFile(dir.file("two.jsonl"), lines);
    toml.replace(toml.find(datasetLine), datasetLine.size(), "path = \"" + dir.file("two.jsonl") + "\"");
    toml.replace(toml.find("dir = \"model\""), 13, "dir = \"" + f.model + "\"");
    test::writeTextFile(dir.file("two.toml"), toml);

    MainWindow window;
    QSignalSpy finished(window.worker(), &ModelWorker::batchFinished);
    QSignalSpy progress(window.worker(), &ModelWorker::progress);
    window.runBatch(QString::fromStdString(dir.file("two.toml")), QString::fromStdString(dir.file("gui.db")));
    ASSERT_TRUE(waitFor([&] { return finished.count() > 0 || !window.lastError().isEmpty(); }));
    ASSERT_TRUE(window.lastError().isEmpty()) << window.lastError().toStdString();
    EXPECT_GE(progress.count(), 2);
    // The spy hears batchFinished in the worker's thread; the window opens the ledger when the queued
    // signal reaches the GUI thread, a moment later.
    EXPECT_TRUE(waitFor([&] { return window.ledgerPage()->itemModel()->rowCount() == 2; }))
        << "the finished ledger is opened (" << window.ledgerPage()->itemModel()->rowCount() << " rows)";
    const auto cli = test::runCli("run " + dir.file("two.toml") + " --ledger " + dir.file("cli.db"));
    ASSERT_EQ(cli.exitCode, 0) << cli.err;
    const experiments::Ledger gui(dir.file("gui.db")), reference(dir.file("cli.db"));
    ASSERT_EQ(gui.runs().front().runId, reference.runs().front().runId) << "same manifest, same run id";
    const auto a = gui.items(gui.runs().front().runId), b = reference.items(reference.runs().front().runId);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].trajectories, b[i].trajectories);
        EXPECT_EQ(a[i].fingerprints, b[i].fingerprints);
        EXPECT_EQ(experiments::toJson(a[i].results), experiments::toJson(b[i].results));
    }

    // Cancel between items: a batch stops and says how to resume. A second batch queued behind it
    // is cancelled by the same press before it starts: it never runs, and writes no ledger.
    QSignalSpy stopped(window.worker(), &ModelWorker::batchFinished);
    QSignalSpy started(window.worker(), &ModelWorker::started);
    QSignalSpy cancelled(window.worker(), &ModelWorker::cancelled);
    window.runBatch(QString::fromStdString(f.experiment), QString::fromStdString(dir.file("cancelled.db")));
    const quint64 running = window.jobs().lastIssued();
    window.runBatch(QString::fromStdString(f.experiment), QString::fromStdString(dir.file("queued.db")));
    const quint64 queued = window.jobs().lastIssued();
    ASSERT_TRUE(waitFor([&] { return started.count() > 0; }));
    window.cancelAll();
    ASSERT_TRUE(waitFor([&] { return cancelled.count() == 2; }));
    EXPECT_EQ(cancelled.at(0).at(0).value<quint64>(), running);
    EXPECT_EQ(cancelled.at(1).at(0).value<quint64>(), queued);
    ASSERT_EQ(started.count(), 1) << "the queued batch must not start";
    EXPECT_EQ(started.front().at(0).value<quint64>(), running);
    EXPECT_FALSE(std::filesystem::exists(dir.file("queued.db")));
    ASSERT_EQ(stopped.count(), 1);
    EXPECT_LT(experiments::Ledger(dir.file("cancelled.db")).runs().front().itemsDone, 12);
    EXPECT_NE(stopped.front().at(1).toString().indexOf(QStringLiteral("resume")), -1)
        << stopped.front().at(1).toString().toStdString();
    EXPECT_TRUE(waitFor([&] { return !window.busy(); })) << "the window is idle once both jobs ended";
}

TEST(GuiCommandLine, ScreenshotOfTheMainWindowWithALedger) {
    const LedgerFixture& f = ledgerFixture();
    const QString shot = QStringLiteral(KVSCOPE_SCREENSHOT_DIR "/main-window.png");
    QFile::remove(shot);
    QProcess gui;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), QString::fromStdString(f.dir));
    gui.setProcessEnvironment(env);
    gui.start(QStringLiteral(KVSCOPE_GUI),
              {QString::fromStdString(f.ledger), QStringLiteral("--item"),
               QString::fromStdString(f.items.front().itemId), QStringLiteral("--screenshot"), shot});
    ASSERT_TRUE(gui.waitForFinished(180000));
    EXPECT_EQ(gui.exitCode(), 0) << gui.readAllStandardError().toStdString();
    const QImage image(shot);
    ASSERT_FALSE(image.isNull());
    EXPECT_GE(image.width(), 800);
    EXPECT_GE(image.height(), 600);

    // --transplant: the picture waits for the panel's default splice and its verdict.
    QProcess spliced;
    spliced.setProcessEnvironment(env);
    const QString splicedShot = QString::fromStdString(f.dir + "/spliced.png");
    spliced.start(QStringLiteral(KVSCOPE_GUI), {QString::fromStdString(f.ledger), QStringLiteral("--screenshot"),
                                                splicedShot, QStringLiteral("--transplant")});
    ASSERT_TRUE(spliced.waitForFinished(180000));
    EXPECT_EQ(spliced.exitCode(), 0) << spliced.readAllStandardError().toStdString();
    EXPECT_FALSE(QImage(splicedShot).isNull());

    QProcess version;
    version.start(QStringLiteral(KVSCOPE_GUI), {QStringLiteral("--version")});
    ASSERT_TRUE(version.waitForFinished(60000));
    EXPECT_EQ(version.exitCode(), 0);
    EXPECT_NE(version.readAllStandardOutput().indexOf("Qt 6"), -1);

    QProcess missing;
    missing.setProcessEnvironment(env);
    missing.start(QStringLiteral(KVSCOPE_GUI),
                  {QString::fromStdString(f.dir + "/none.db"), QStringLiteral("--screenshot"),
                   QString::fromStdString(f.dir + "/x.png")});
    ASSERT_TRUE(missing.waitForFinished(60000));
    EXPECT_NE(missing.exitCode(), 0);
    EXPECT_NE(missing.readAllStandardError().indexOf("none.db"), -1);
}

// Read before any window system is touched: without a display, --help and --version still answer
// (Qt's platform plugin would abort the process).
TEST(GuiCommandLine, HelpAndVersionNeedNoDisplay) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const char* variable : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
        env.remove(QString::fromLatin1(variable));
    for (const auto& [option, says] : {std::pair{"--version", "Qt 6"}, std::pair{"--help", "--screenshot"}}) {
        QProcess gui;
        gui.setProcessEnvironment(env);
        gui.start(QStringLiteral(KVSCOPE_GUI), {QString::fromLatin1(option)});
        ASSERT_TRUE(gui.waitForFinished(60000)) << option;
        EXPECT_EQ(gui.exitStatus(), QProcess::NormalExit) << option;
        EXPECT_EQ(gui.exitCode(), 0) << option << ": " << gui.readAllStandardError().toStdString();
        EXPECT_NE(gui.readAllStandardOutput().indexOf(says), -1) << option;
    }
}

}  // namespace
}  // namespace kvscope::widgets

int main(int argc, char** argv) {
    kvscope::widgets::reexecWithQuietThreads(argv);
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("kvscope-tests"));
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
