// SPDX-License-Identifier: MIT
#pragma once
// An imported run's trajectories as a table: one row per trajectory with the engine's metadata and
// what the chosen replay basis says of it (first argmax mismatch, max and mean |delta logprob|),
// sortable by each. Whole-result setter inside a model reset.
#include "experiments/replay_inspection.h"

#include <QAbstractTableModel>

#include <vector>

namespace kvscope::widgets {

class TrajectoryTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns {
        IdColumn,
        EngineColumn,
        BatchSizeColumn,
        TokensColumn,
        FirstArgmaxMismatchColumn,
        MaxAbsDeltaColumn,
        MeanAbsDeltaColumn,
        NUM_COLUMNS
    };
    enum Roles {
        // Numbers for numeric columns. Without a value an item sorts where it matters least: after
        // every step for the first argmax mismatch ("none"), below every |delta| for the deltas.
        SortRole = Qt::UserRole,
    };

    explicit TrajectoryTableModel(QObject* parent = nullptr);
    void setItems(std::vector<experiments::ItemRecord> items, const experiments::DeltaBasis& basis);
    void setBasis(const experiments::DeltaBasis& basis);
    const std::vector<experiments::ItemRecord>& items() const { return items_; }
    const experiments::ItemRecord& record(int row) const { return items_.at(static_cast<std::size_t>(row)); }
    const experiments::DeltaBasis& basis() const { return basis_; }
    const experiments::ItemMismatch& mismatch(int row) const { return mismatches_.at(static_cast<std::size_t>(row)); }
    int rowOfItem(const QString& itemId) const;  // -1 when absent

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QVariant display(std::size_t row, int column) const;
    QVariant sortKey(std::size_t row, int column) const;
    std::vector<experiments::ItemRecord> items_;
    std::vector<experiments::ItemMismatch> mismatches_;  // per row, on basis_
    experiments::DeltaBasis basis_;
};

}  // namespace kvscope::widgets
