// SPDX-License-Identifier: MIT
#include "widgets/run_table_model.h"

#include <QFileInfo>

namespace kvscope::widgets {

RunTableModel::RunTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunTableModel::setRuns(std::vector<experiments::RunInfo> runs) {
    beginResetModel();
    runs_ = std::move(runs);
    endResetModel();
}

int RunTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}
int RunTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : NUM_COLUMNS; }

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case NameColumn: return tr("Experiment");
    case CreatedColumn: return tr("Created");
    case ModelColumn: return tr("Model");
    case DtypeColumn: return tr("Precision");
    case DatasetColumn: return tr("Dataset");
    case ItemsColumn: return tr("Items done");
    case RunIdColumn: return tr("Run id");
    }
    return {};
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= NUM_COLUMNS) return {};
    const experiments::RunInfo& r = runs_[static_cast<std::size_t>(index.row())];
    if (role == RunIdRole) return QString::fromStdString(r.runId);
    if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
    const experiments::RunDescription d = experiments::describeRun(r.manifest);
    auto text = [](const std::string& s) { return QString::fromStdString(s); };
    const bool tip = role == Qt::ToolTipRole;
    switch (index.column()) {
    case NameColumn: return text(d.name);
    case CreatedColumn: return text(r.created);
    case ModelColumn: return tip ? text(d.modelPath) : QFileInfo(text(d.modelPath)).fileName();
    case DtypeColumn: {
        QStringList dtypes;  // ["bf16", "fp32"] -> "bf16, fp32"
        for (const std::string& dtype : d.dtypes) dtypes << text(dtype);
        return dtypes.join(QStringLiteral(", "));
    }
    case DatasetColumn: return tip ? text(d.datasetPath) : QFileInfo(text(d.datasetPath)).fileName();
    case ItemsColumn: return static_cast<qlonglong>(r.itemsDone);
    case RunIdColumn: return text(r.runId);
    }
    return {};
}

}  // namespace kvscope::widgets
