// SPDX-License-Identifier: MIT
#include "widgets/main_window.h"

#include "widgets/batch_continuations_view.h"
#include "widgets/decode_compare_view.h"
#include "widgets/kv_heatmap_view.h"
#include "widgets/ledger_page.h"
#include "widgets/session_page.h"
#include "widgets/trajectory_view.h"
#include "widgets/transplant_panel.h"

#include "core/model/gguf.h"
#include "core/util/version.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QStyle>
#include <QStyleFactory>
#include <QTabWidget>
#include <QToolBar>
#include <QToolButton>

namespace kvscope::widgets {

namespace {
constexpr int kMaxRecent = 8;
const QString kRecentKey = QStringLiteral("recentFiles");
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("kvscope"));
    setWindowIcon(QIcon(QStringLiteral(":/kvscope/kvscope.svg")));
    tabs_ = new QTabWidget(this);
    ledger_ = new LedgerPage(tabs_);
    session_ = new SessionPage(tabs_);
    tabs_->addTab(ledger_, tr("Ledger"));
    tabs_->addTab(session_, tr("Session"));
    setCentralWidget(tabs_);
    setupWorker();
    setupDocks();
    setupMenus();
    setupStatusBar();
    connectWorkerLifecycle();
    connectLedger();
    connectTrajectories();
    connectSession();
    restoreSettings();
}

MainWindow::~MainWindow() {
    cancelAll();
    workerThread_.quit();
    workerThread_.wait();
}

void MainWindow::setupWorker() {
    worker_ = new ModelWorker;
    worker_->moveToThread(&workerThread_);
    connect(&workerThread_, &QThread::finished, worker_, &QObject::deleteLater);
    workerThread_.setObjectName(QStringLiteral("kvscope model worker"));
    workerThread_.start();
}

void MainWindow::setupDocks() {
    auto dock = [this](const QString& title, QWidget* widget, Qt::DockWidgetArea area) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(title);  // saveState needs names
        d->setWidget(widget);
        addDockWidget(area, d);
        return d;
    };
    decodesStack_ = new QStackedWidget(this);
    decodes_ = new DecodeCompareView(decodesStack_);
    trajectory_ = new TrajectoryView(decodesStack_);
    decodesStack_->addWidget(decodes_);
    decodesStack_->addWidget(trajectory_);
    batch_ = new BatchContinuationsView(this);
    heatmap_ = new KvHeatmapView(this);
    connect(heatmap_, &KvHeatmapView::exportFailed, this,
            [this](const QString& message) { showError(tr("Export failed"), message); });
    transplant_ = new TransplantPanel(this);
    QDockWidget* decodes = dock(tr("Decodes"), decodesStack_, Qt::RightDockWidgetArea);
    QDockWidget* heatmap = dock(tr("KV difference"), heatmap_, Qt::BottomDockWidgetArea);
    QDockWidget* transplant = dock(tr("Transplant"), transplant_, Qt::RightDockWidgetArea);
    batchDock_ = dock(tr("Batch sizes"), batch_, Qt::RightDockWidgetArea);
    splitDockWidget(decodes, transplant, Qt::Horizontal);
    tabifyDockWidget(decodes, batchDock_);
    decodes->raise();
    resizeDocks({decodes, transplant}, {700, 260}, Qt::Horizontal);
    viewMenu_ = new QMenu(tr("&View"), this);
    for (QDockWidget* d : {decodes, heatmap, transplant, batchDock_}) viewMenu_->addAction(d->toggleViewAction());
}

void MainWindow::setupMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* openLedgerAction = file->addAction(tr("&Open ledger\u2026"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open ledger"), QString(),
                                                          tr("kvscope ledgers (*.db);;All files (*)"));
        if (!path.isEmpty()) openLedger(path);
    });
    openLedgerAction->setShortcut(QKeySequence::Open);
    openLedgerAction->setIcon(style()->standardIcon(QStyle::SP_DialogOpenButton));
    QAction* openModelAction = file->addAction(tr("Open &model\u2026"), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Open model folder"));
        if (!dir.isEmpty()) openModel(dir);
    });
    openModelAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_M));
    openModelAction->setIcon(style()->standardIcon(QStyle::SP_DirOpenIcon));
    file->addAction(tr("Open &GGUF model\u2026"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open GGUF model"), QString(),
                                                          tr("GGUF models (*.gguf);;All files (*)"));
        if (!path.isEmpty()) openModel(path);
    });
    recentMenu_ = file->addMenu(tr("Recent files"));
    file->addSeparator();
    file->addAction(tr("&Export heatmap\u2026"), heatmap_, &KvHeatmapView::exportWithDialog)
        ->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    QAction* batch = run->addAction(tr("Run experiment &batch\u2026"), this, &MainWindow::chooseBatchRun);
    batch->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
    batch->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
    QAction* cancel = run->addAction(tr("&Cancel"), this, &MainWindow::cancelAll);
    cancel->setShortcut(QKeySequence(Qt::Key_Escape));
    cancel->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
    run->addAction(tr("Run &transplant"), transplant_, &TransplantPanel::run);

    menuBar()->addMenu(viewMenu_);
    viewMenu_->addSeparator();
    darkAction_ = viewMenu_->addAction(tr("&Dark theme"));
    darkAction_->setCheckable(true);
    connect(darkAction_, &QAction::toggled, this, &MainWindow::setDarkTheme);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About kvscope"), this, &MainWindow::showAbout);
    help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);

    QToolBar* bar = addToolBar(tr("Main"));
    bar->setObjectName(QStringLiteral("mainToolBar"));
    bar->addActions({openLedgerAction, openModelAction, batch, cancel});
}

void MainWindow::setupStatusBar() {
    modelLabel_ = new QLabel(tr("no model"), this);
    taskLabel_ = new QLabel(this);
    progress_ = new QProgressBar(this);
    progress_->setMaximumWidth(200);
    progress_->hide();
    cancelButton_ = new QToolButton(this);
    cancelButton_->setIcon(style()->standardIcon(QStyle::SP_DialogCancelButton));
    cancelButton_->setToolTip(tr("Cancel the running task (Esc)"));
    cancelButton_->hide();
    connect(cancelButton_, &QToolButton::clicked, this, &MainWindow::cancelAll);
    statusBar()->addWidget(taskLabel_, 1);
    statusBar()->addPermanentWidget(progress_);
    statusBar()->addPermanentWidget(cancelButton_);
    statusBar()->addPermanentWidget(modelLabel_);
}

void MainWindow::connectWorkerLifecycle() {
    // Worker lifecycle -> status bar. Every job ends with one of finished, failed or cancelled.
    connect(worker_, &ModelWorker::started, this, [this](quint64, const QString& task) {
        taskLabel_->setText(tr("%1\u2026").arg(task));
        progress_->setRange(0, 0);
        setBusy(true);
    });
    connect(worker_, &ModelWorker::finished, this, [this](quint64 job, const QString& task) {
        jobs_.close(job);
        taskLabel_->setText(tr("%1: done").arg(task));
        setBusy(jobs_.anyOpen());
    });
    connect(worker_, &ModelWorker::failed, this, [this](quint64 job, const QString& task, const QString& message) {
        jobs_.close(job);
        setBusy(jobs_.anyOpen());
        taskLabel_->setText(tr("%1 failed").arg(task));
        showError(tr("%1 failed").arg(task), message);
        emit taskFailed(message);
    });
    connect(worker_, &ModelWorker::cancelled, this, [this](quint64 job, const QString& task) {
        jobs_.close(job);
        setBusy(jobs_.anyOpen());
        taskLabel_->setText(tr("%1 cancelled").arg(task));
        emit taskCancelled(task);
    });
    connect(worker_, &ModelWorker::progress, this, [this](int done, int total, const QString& message) {
        progress_->setRange(0, total);
        progress_->setValue(done);
        taskLabel_->setText(message);
    });
    connect(worker_, &ModelWorker::modelOpened, this, [this](const ModelSummary& m) {
        modelLabel_->setText(tr("%1 \u00b7 %2 layers \u00b7 %3 \u00b7 %4")
                                 .arg(QFileInfo(m.dir).fileName())
                                 .arg(m.layers)
                                 .arg(m.device, m.dtype));
        modelLabel_->setToolTip(tr("%1\n%2, weights fingerprint %3").arg(m.dir, m.architecture, m.fingerprint));
        QSettings().setValue(QStringLiteral("lastModel"), m.dir);
    });
    connect(worker_, &ModelWorker::batchFinished, this, [this](const QString& ledgerPath, const QString& summary) {
        statusBar()->showMessage(tr("Batch finished: %1").arg(summary), 10000);
        openLedger(ledgerPath);
    });
}

void MainWindow::connectLedger() {
    // Selection drives every view; results of superseded jobs are dropped.
    connect(ledger_, &LedgerPage::itemSelected, this,
            [this](const experiments::RunInfo& run, const experiments::ItemRecord& item) {
                decodesStack_->setCurrentWidget(decodes_);
                decodes_->clear();
                heatmap_->clear();
                batch_->clear();
                const experiments::RunDescription d = experiments::describeRun(run.manifest);
                modelLabel_->setText(tr("%1 \u00b7 %2 \u00b7 %3")
                                         .arg(QFileInfo(QString::fromStdString(d.modelPath)).fileName(),
                                              QString::fromStdString(d.dtypes.empty() ? "" : d.dtypes.front()),
                                              QString::fromStdString(d.device)));
                worker_->analyzeLedgerItem(startJob(JobKind::Analysis), run, item);
            });
    connect(worker_, &ModelWorker::analysisReady, this, [this](const AnalysisView& a) {
        if (!jobs_.isCurrent(JobKind::Analysis, a.job)) return;
        batch_->showAnalysis(a);
        if (!a.hasBoundary) {  // nothing to compare at a boundary: the batch sizes are all there is
            batchDock_->raise();
            emit analysisShown();
            return;
        }
        decodes_->showAnalysis(a);
        heatmap_->setDiff(a.diff, a.diffNote.isEmpty() ? a.title : a.diffNote);
        if (a.liveVsPrefill) transplant_->setAnalysis(a);  // transplants splice the live and prefill caches
        emit analysisShown();
    });
    connect(decodes_, &DecodeCompareView::compareRequested, this,
            [this](const SideSpec& a, const SideSpec& b) { worker_->compareSides(startJob(JobKind::Analysis), a, b); });
    connect(transplant_, &TransplantPanel::transplantRequested, this,
            [this](const TransplantRequest& r) { worker_->transplant(startJob(JobKind::Transplant), r); });
    connect(worker_, &ModelWorker::transplantReady, this, [this](const TransplantView& r) {
        if (!jobs_.isCurrent(JobKind::Transplant, r.job)) return;
        decodes_->showTransplant(r);
        transplant_->showResult(r);
        emit transplantShown();
    });
}

void MainWindow::connectTrajectories() {
    // An imported run's trajectory: its numbers at once, its tokens' text from the worker (the
    // run's tokenizer), a step located on request; the basis comes from the ledger page.
    connect(ledger_, &LedgerPage::trajectorySelected, this,
            [this](const experiments::RunInfo& run, const experiments::ItemRecord& item) {
                trajectoryRun_ = run;
                trajectoryItem_ = item;
                decodesStack_->setCurrentWidget(trajectory_);
                heatmap_->clear();
                batch_->clear();
                trajectory_->showItem(item, ledger_->basis());
                worker_->describeTrajectory(startJob(JobKind::Analysis), run, item);
            });
    connect(ledger_, &LedgerPage::basisChanged, trajectory_, &TrajectoryView::setBasis);
    connect(worker_, &ModelWorker::trajectoryTokensReady, this, [this](const TrajectoryTokens& t) {
        if (!jobs_.isCurrent(JobKind::Analysis, t.job)) return;
        trajectory_->setTokens(t);
        emit trajectoryShown();
    });
    connect(trajectory_, &TrajectoryView::locateRequested, this, [this](int step) {
        worker_->locateReplayStep(startJob(JobKind::Locate), trajectoryRun_, trajectoryItem_, trajectory_->basis(),
                                  step);
    });
    connect(worker_, &ModelWorker::stepLocated, this, [this](const StepLocation& l) {
        if (!jobs_.isCurrent(JobKind::Locate, l.job)) return;
        trajectory_->showLocation(l);
        emit stepLocated();
    });
}

bool MainWindow::showsTrajectory() const { return decodesStack_->currentWidget() == trajectory_; }

void MainWindow::connectSession() {
    connect(session_, &SessionPage::openModelRequested, this, [this](const QString& dir, const QString& dtype) {
        worker_->openModel(startJob(JobKind::OpenModel), dir, dtype);
    });
    connect(session_, &SessionPage::decodeRequested, this,
            [this](const QString& promptText, const QString& promptIds, int maxNewTokens) {
                worker_->decodeSession(startJob(JobKind::Decode), promptText, promptIds, maxNewTokens);
            });
    connect(worker_, &ModelWorker::tokenDecoded, this, [this](quint64 job, const TokenView& token) {
        if (jobs_.isCurrent(JobKind::Decode, job)) session_->appendToken(token);
    });
    connect(worker_, &ModelWorker::sessionDecoded, this, [this](const SessionDecode& d) {
        if (jobs_.isCurrent(JobKind::Decode, d.job)) session_->showDecode(d);
    });
    connect(session_, &SessionPage::compareRequested, this,
            [this](const std::vector<int64_t>& prompt, const std::vector<int64_t>& trace, int boundary, int maxNew) {
                worker_->analyzeSession(startJob(JobKind::Analysis), prompt, trace, boundary, maxNew);
            });
}

quint64 MainWindow::startJob(JobKind kind) {
    const JobTracker::Started s = jobs_.start(kind);
    if (s.superseded != 0) worker_->cancel(s.superseded);
    return s.job;
}

void MainWindow::cancelAll() { worker_->cancelThrough(jobs_.lastIssued()); }

void MainWindow::setBusy(bool busy) {
    progress_->setVisible(busy);
    cancelButton_->setVisible(busy);
    transplant_->setRunning(busy);
    session_->setBusy(busy);
}

bool MainWindow::busy() const { return !cancelButton_->isHidden(); }

QString MainWindow::taskText() const { return taskLabel_->text(); }

bool MainWindow::openPath(const QString& path, QString* error) {
    if (isGgufFile(path.toStdString())) {  // a model as llama.cpp keeps it (the command line, recent files)
        openModel(path);
        return true;
    }
    if (QFileInfo(path).isDir()) {
        if (!QFileInfo::exists(path + QStringLiteral("/config.json"))) {
            lastError_ = tr("%1 is a folder without config.json: not a Hugging Face model folder").arg(path);
            if (error) *error = lastError_;
            showError(tr("Cannot open"), lastError_);
            return false;
        }
        openModel(path);
        return true;
    }
    return openLedger(path, error);
}

bool MainWindow::openLedger(const QString& path, QString* error) {
    try {
        ledger_->openLedger(path);
    } catch (const std::exception& e) {
        lastError_ = QString::fromStdString(e.what());
        if (error) *error = lastError_;
        showError(tr("Cannot open ledger"), lastError_);
        return false;
    }
    tabs_->setCurrentWidget(ledger_);
    setWindowTitle(tr("kvscope \u2014 %1").arg(QFileInfo(path).fileName()));
    QSettings().setValue(QStringLiteral("lastLedger"), path);
    rememberRecent(path);
    return true;
}

void MainWindow::openModel(const QString& dir) {
    session_->setModelDir(dir);
    tabs_->setCurrentWidget(session_);
    rememberRecent(dir);
    worker_->openModel(startJob(JobKind::OpenModel), dir, session_->dtype());
}

bool MainWindow::selectItem(const QString& itemId) { return ledger_->selectItem(itemId); }

void MainWindow::runBatch(const QString& experimentFile, const QString& ledgerPath) {
    worker_->runBatch(startJob(JobKind::Batch), experimentFile, ledgerPath);
}

void MainWindow::chooseBatchRun() {
    const QString experiment =
        QFileDialog::getOpenFileName(this, tr("Experiment file"), QString(), tr("Experiments (*.toml)"));
    if (experiment.isEmpty()) return;
    const QString ledgerPath =
        QFileDialog::getSaveFileName(this, tr("Ledger to write (an existing one is resumed)"),
                                     QFileInfo(experiment).completeBaseName() + QStringLiteral(".db"),
                                     tr("kvscope ledgers (*.db)"), nullptr, QFileDialog::DontConfirmOverwrite);
    if (!ledgerPath.isEmpty()) runBatch(experiment, ledgerPath);
}

void MainWindow::setDarkTheme(bool dark) {
    qApp->setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
    QPalette p = qApp->style()->standardPalette();
    if (dark) {
        p.setColor(QPalette::Window, QColor(45, 45, 48));
        p.setColor(QPalette::WindowText, Qt::white);
        p.setColor(QPalette::Base, QColor(30, 30, 30));
        p.setColor(QPalette::AlternateBase, QColor(45, 45, 48));
        p.setColor(QPalette::Text, Qt::white);
        p.setColor(QPalette::Button, QColor(55, 55, 58));
        p.setColor(QPalette::ButtonText, Qt::white);
        p.setColor(QPalette::Highlight, QColor(42, 130, 218));
    }
    qApp->setPalette(p);
    QSettings().setValue(QStringLiteral("darkTheme"), dark);
}

void MainWindow::rememberRecent(const QString& path) {
    QSettings settings;
    QStringList recent = settings.value(kRecentKey).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent) recent.removeLast();
    settings.setValue(kRecentKey, recent);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
    recentMenu_->clear();
    for (const QString& path : QSettings().value(kRecentKey).toStringList())
        recentMenu_->addAction(path, this, [this, path] { openPath(path); });
    recentMenu_->setEnabled(!recentMenu_->isEmpty());
}

void MainWindow::restoreSettings() {
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("windowState")).toByteArray());
    session_->setModelDir(settings.value(QStringLiteral("lastModel")).toString());
    if (settings.value(QStringLiteral("darkTheme"), false).toBool()) darkAction_->setChecked(true);
    rebuildRecentMenu();
}

void MainWindow::closeEvent(QCloseEvent* event) {
    QSettings settings;
    settings.setValue(QStringLiteral("geometry"), saveGeometry());
    settings.setValue(QStringLiteral("windowState"), saveState());
    cancelAll();
    event->accept();
}

void MainWindow::showError(const QString& title, const QString& message) {
    lastError_ = message;
    // Headless runs (tests, --screenshot) must not block on a modal dialog.
    if (QGuiApplication::platformName() == QStringLiteral("offscreen") || property("noDialogs").toBool()) {
        statusBar()->showMessage(tr("%1: %2").arg(title, message));
        return;
    }
    QMessageBox::warning(this, title, message);
}

void MainWindow::showAbout() {
    QMessageBox::about(this, tr("About kvscope"),
                       tr("<h3>kvscope %1</h3><p>Inspect the KV cache of open LLMs: live decoding vs one-shot "
                          "prefill, where the bits differ, and which layers carry the difference.</p>"
                          "<p>Qt %2 (built with %3)<br>libtorch %4<br>%5</p>")
                           .arg(QString::fromStdString(kvscopeVersion()), QString::fromLatin1(qVersion()),
                                QStringLiteral(QT_VERSION_STR), QString::fromStdString(libtorchVersion()),
                                QString::fromStdString(deviceSummary())));
}

}  // namespace kvscope::widgets
