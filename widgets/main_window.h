// SPDX-License-Identifier: MIT
#pragma once
// The main window only assembles: the ledger and session pages as tabs, the decode comparison, KV
// heatmap and transplant panel as docks, menus, toolbar and status bar, settings and the worker
// thread. Every view's behaviour lives in its own class.
#include "widgets/job_tracker.h"
#include "widgets/model_worker.h"

#include <QMainWindow>
#include <QThread>

class QDockWidget;
class QLabel;
class QProgressBar;
class QStackedWidget;
class QTabWidget;
class QToolButton;

namespace kvscope::widgets {

class BatchContinuationsView;
class DecodeCompareView;
class KvHeatmapView;
class LedgerPage;
class SessionPage;
class TrajectoryView;
class TransplantPanel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    // A ledger (.db), a model folder (config.json inside) or a GGUF file. Errors are shown, and returned.
    bool openPath(const QString& path, QString* error = nullptr);
    bool openLedger(const QString& path, QString* error = nullptr);
    void openModel(const QString& dir);
    bool selectItem(const QString& itemId);
    void runBatch(const QString& experimentFile, const QString& ledgerPath);
    void setDarkTheme(bool dark);
    void cancelAll();  // Run > Cancel (Esc): the running job and every queued one

    LedgerPage* ledgerPage() const { return ledger_; }
    SessionPage* sessionPage() const { return session_; }
    DecodeCompareView* decodeView() const { return decodes_; }
    TrajectoryView* trajectoryView() const { return trajectory_; }
    BatchContinuationsView* batchView() const { return batch_; }
    // The Decodes dock shows the study's live/prefill panes, or an imported trajectory.
    bool showsTrajectory() const;
    KvHeatmapView* heatmapView() const { return heatmap_; }
    TransplantPanel* transplantPanel() const { return transplant_; }
    ModelWorker* worker() const { return worker_; }
    const JobTracker& jobs() const { return jobs_; }
    QString taskText() const;  // the status bar's task label
    bool busy() const;         // the cancel button shows while a job is open
    QString lastError() const { return lastError_; }

signals:
    void analysisShown();                         // the views show a new analysis
    void transplantShown();
    void trajectoryShown();                       // an imported trajectory's tokens arrived
    void stepLocated();                           // the trajectory view shows a located step
    void taskFailed(const QString& message);
    void taskCancelled(const QString& task);      // a cancelled job: no dialog, the status bar says so

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void setupWorker();
    void setupDocks();
    void setupMenus();
    void setupStatusBar();
    void connectWorkerLifecycle();
    void connectLedger();
    void connectTrajectories();
    void connectSession();
    // A new job id for a request; a request of the same kind still open is superseded and cancelled.
    quint64 startJob(JobKind kind);
    void setBusy(bool busy);
    void restoreSettings();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void showError(const QString& title, const QString& message);
    void showAbout();
    void chooseBatchRun();

    QThread workerThread_;
    ModelWorker* worker_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    LedgerPage* ledger_ = nullptr;
    SessionPage* session_ = nullptr;
    DecodeCompareView* decodes_ = nullptr;
    TrajectoryView* trajectory_ = nullptr;
    QStackedWidget* decodesStack_ = nullptr;  // decodes_ or trajectory_
    BatchContinuationsView* batch_ = nullptr;
    QDockWidget* batchDock_ = nullptr;
    // The imported trajectory the trajectory view shows: what a click on a step locates.
    experiments::RunInfo trajectoryRun_;
    experiments::ItemRecord trajectoryItem_;
    KvHeatmapView* heatmap_ = nullptr;
    TransplantPanel* transplant_ = nullptr;
    QMenu* recentMenu_ = nullptr;
    QMenu* viewMenu_ = nullptr;
    QLabel* modelLabel_ = nullptr;
    QLabel* taskLabel_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QToolButton* cancelButton_ = nullptr;
    QAction* darkAction_ = nullptr;
    JobTracker jobs_;
    QString lastError_;
};

}  // namespace kvscope::widgets
