// SPDX-License-Identifier: MIT
#pragma once
// The ledger browser page: the runs of an opened ledger, the items of the selected run (sortable,
// filterable), and the selection that drives every other view.
#include "experiments/ledger.h"

#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QTableView;

namespace kvscope::widgets {

class ItemFilterProxy;
class ItemTableModel;
class LedgerSummaryView;
class RunTableModel;

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

signals:
    void itemSelected(const experiments::RunInfo& run, const experiments::ItemRecord& item);

private:
    void setupViews();
    void setupFilters(QWidget* bar);
    void showRun(int row);
    void onItemRowChanged();

    QString path_;
    std::vector<experiments::RunInfo> runInfos_;
    int currentRun_ = -1;
    RunTableModel* runs_ = nullptr;
    ItemTableModel* items_ = nullptr;
    ItemFilterProxy* proxy_ = nullptr;
    QTableView *runView_ = nullptr, *itemView_ = nullptr;
    QLabel* counts_ = nullptr;
    LedgerSummaryView* summary_ = nullptr;
};

}  // namespace kvscope::widgets
