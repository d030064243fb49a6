// SPDX-License-Identifier: MIT
#pragma once
// The runs of a ledger: one row per run (its manifest summarised).
#include "experiments/ledger.h"

#include <QAbstractTableModel>

#include <vector>

namespace kvscope::widgets {

class RunTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns {
        NameColumn,
        CreatedColumn,
        ModelColumn,
        DtypeColumn,
        DatasetColumn,
        ItemsColumn,
        RunIdColumn,
        NUM_COLUMNS
    };
    enum Roles { RunIdRole = Qt::UserRole };

    explicit RunTableModel(QObject* parent = nullptr);
    void setRuns(std::vector<experiments::RunInfo> runs);
    const experiments::RunInfo& run(int row) const { return runs_.at(static_cast<std::size_t>(row)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<experiments::RunInfo> runs_;
};

}  // namespace kvscope::widgets
