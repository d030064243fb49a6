// SPDX-License-Identifier: MIT
#include "widgets/trajectory_table_model.h"

#include "widgets/item_table_model.h"

#include <limits>

namespace kvscope::widgets {

using experiments::ItemRecord;

namespace {
constexpr double kMissing = std::numeric_limits<double>::infinity();  // sorts after every number
}  // namespace

TrajectoryTableModel::TrajectoryTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void TrajectoryTableModel::setItems(std::vector<ItemRecord> items, const experiments::DeltaBasis& basis) {
    beginResetModel();
    items_ = std::move(items);
    basis_ = basis;
    mismatches_.clear();
    for (const ItemRecord& item : items_) mismatches_.push_back(experiments::itemMismatch(item, basis_));
    endResetModel();
}

void TrajectoryTableModel::setBasis(const experiments::DeltaBasis& basis) {
    basis_ = basis;
    for (std::size_t i = 0; i < items_.size(); ++i) mismatches_[i] = experiments::itemMismatch(items_[i], basis_);
    // The rows stay (and a view's selection with them); only the basis's columns change.
    if (!items_.empty())
        emit dataChanged(index(0, FirstArgmaxMismatchColumn), index(rowCount() - 1, MeanAbsDeltaColumn));
}

int TrajectoryTableModel::rowOfItem(const QString& itemId) const { return rowOfItemId(items_, itemId); }

int TrajectoryTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(items_.size());
}
int TrajectoryTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : NUM_COLUMNS; }

QVariant TrajectoryTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case IdColumn: return tr("Trajectory");
    case EngineColumn: return tr("Engine");
    case BatchSizeColumn: return tr("Batch size");
    case TokensColumn: return tr("Output tokens");
    case FirstArgmaxMismatchColumn: return tr("First argmax mismatch");
    case MaxAbsDeltaColumn: return tr("Max |delta|");
    case MeanAbsDeltaColumn: return tr("Mean |delta|");
    }
    return {};
}

QVariant TrajectoryTableModel::display(std::size_t row, int column) const {
    const ItemRecord& item = items_[row];
    const experiments::ItemMismatch& m = mismatches_[row];
    const experiments::EngineRecord* engine = item.results.engine ? &*item.results.engine : nullptr;
    auto number = [](const std::optional<double>& x) { return x ? QVariant(QString::number(*x, 'g', 4)) : QVariant(); };
    switch (column) {
    case IdColumn: return QString::fromStdString(item.itemId);
    case EngineColumn:
        return engine ? QVariant(QStringLiteral("%1 (%2)").arg(QString::fromStdString(engine->engine),
                                                               QString::fromStdString(engine->dtype)))
                      : QVariant();
    case BatchSizeColumn:
        return engine && engine->batchSize ? QVariant(static_cast<qlonglong>(*engine->batchSize)) : QVariant();
    case TokensColumn: {
        const std::optional<std::vector<int64_t>>& output = item.trajectories.output;
        return output ? QVariant(static_cast<qlonglong>(output->size())) : QVariant();
    }
    case FirstArgmaxMismatchColumn:
        if (!m.replayed) return tr("not replayed");
        return m.firstArgmaxMismatch ? QVariant(static_cast<qlonglong>(*m.firstArgmaxMismatch)) : QVariant(tr("none"));
    case MaxAbsDeltaColumn: return number(m.maxAbsDelta);
    case MeanAbsDeltaColumn: return number(m.meanAbsDelta);
    }
    return {};
}

QVariant TrajectoryTableModel::sortKey(std::size_t row, int column) const {
    const experiments::ItemMismatch& m = mismatches_[row];
    switch (column) {
    case IdColumn: return static_cast<qlonglong>(items_[row].index);
    case FirstArgmaxMismatchColumn:
        return m.firstArgmaxMismatch ? static_cast<double>(*m.firstArgmaxMismatch) : kMissing;
    case MaxAbsDeltaColumn: return m.maxAbsDelta.value_or(-1.0);  // none: below every |delta| (sorts first)
    case MeanAbsDeltaColumn: return m.meanAbsDelta.value_or(-1.0);
    case BatchSizeColumn:
    case TokensColumn: {
        const QVariant v = display(row, column);
        return v.isValid() ? v.toDouble() : kMissing;
    }
    default: return display(row, column);
    }
}

QVariant TrajectoryTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= NUM_COLUMNS) return {};
    const auto row = static_cast<std::size_t>(index.row());
    switch (role) {
    case Qt::DisplayRole: return display(row, index.column());
    case SortRole: return sortKey(row, index.column());
    case Qt::TextAlignmentRole:
        return index.column() >= BatchSizeColumn ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
    }
    return {};
}

}  // namespace kvscope::widgets
