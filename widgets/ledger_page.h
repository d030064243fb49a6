// SPDX-License-Identifier: MIT
#pragma once
// The ledger browser page: the runs of an opened ledger, the items of the selected run (sortable,
// filterable), and the selection that drives every other view. A study's run shows its items with
// the study's columns, summary and filters; an imported run (kvscope import) its trajectories with
// the replay basis, its |delta| histogram and the per-trajectory mismatch columns.
#include "experiments/ledger.h"
#include "experiments/replay_inspection.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QSortFilterProxyModel;
class QStackedWidget;
class QTableView;

namespace kvscope::widgets {

class ItemFilterProxy;
class ItemTableModel;
class LedgerSummaryView;
class ReplaySummaryView;
class RunTableModel;
class TrajectoryTableModel;

class LedgerPage : public QWidget {
    Q_OBJECT
public:
    explicit LedgerPage(QWidget* parent = nullptr);
    // Reads every run of `path` (which must exist); selects the newest. Throws kvscope::Error with a
    // readable message for a missing or malformed file.
    void openLedger(const QString& path);
    const QString& ledgerPath() const { return path_; }
    bool selectItem(const QString& itemId);  // false when the current run has no such item
    const experiments::RunInfo* currentRun() const;

    ItemTableModel* itemModel() const { return items_; }
    ItemFilterProxy* itemProxy() const { return proxy_; }
    QTableView* itemView() const { return itemView_; }
    LedgerSummaryView* summaryView() const { return summary_; }
    // The imported run's side.
    bool showsImportedRun() const;
    TrajectoryTableModel* trajectoryModel() const { return trajectories_; }
    QSortFilterProxyModel* trajectoryProxy() const { return trajectoryProxy_; }
    QTableView* trajectoryView() const { return trajectoryView_; }
    ReplaySummaryView* replaySummary() const { return replaySummary_; }
    const experiments::DeltaBasis& basis() const;

signals:
    void itemSelected(const experiments::RunInfo& run, const experiments::ItemRecord& item);
    // An imported run's trajectory, and the basis its mismatch is measured on (changed by the summary).
    void trajectorySelected(const experiments::RunInfo& run, const experiments::ItemRecord& item);
    void basisChanged(const experiments::DeltaBasis& basis);

private:
    void setupViews();
    QWidget* setupStudyItems(QWidget* parent);
    QWidget* setupTrajectories(QWidget* parent);
    void setupFilters(QWidget* bar);
    void showRun(int row);
    void onItemRowChanged();
    void onTrajectoryRowChanged();

    QString path_;
    std::vector<experiments::RunInfo> runInfos_;
    int currentRun_ = -1;
    RunTableModel* runs_ = nullptr;
    ItemTableModel* items_ = nullptr;
    ItemFilterProxy* proxy_ = nullptr;
    QTableView *runView_ = nullptr, *itemView_ = nullptr;
    QLabel* counts_ = nullptr;
    LedgerSummaryView* summary_ = nullptr;
    QStackedWidget* itemsStack_ = nullptr;  // the study's items, or an imported run's trajectories
    QWidget *studyItems_ = nullptr, *importedItems_ = nullptr;
    TrajectoryTableModel* trajectories_ = nullptr;
    QSortFilterProxyModel* trajectoryProxy_ = nullptr;
    QTableView* trajectoryView_ = nullptr;
    ReplaySummaryView* replaySummary_ = nullptr;
};

}  // namespace kvscope::widgets
