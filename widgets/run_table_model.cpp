// SPDX-License-Identifier: MIT
#include "widgets/run_table_model.h"

#include "widgets/json_path.h"

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
    const nlohmann::json& m = r.manifest;
    auto text = [&](std::initializer_list<const char*> path) -> QString {
        const nlohmann::json* at = jsonAt(m, path);
        if (!at) return {};
        if (at->is_string()) return QString::fromStdString(at->get<std::string>());
        if (at->is_array()) {  // ["bf16", "fp32"] -> "bf16, fp32"
            QStringList parts;
            for (const auto& e : *at)
                parts << (e.is_string() ? QString::fromStdString(e.get<std::string>())
                                        : QString::fromStdString(e.dump()));
            return parts.join(QStringLiteral(", "));
        }
        return QString::fromStdString(at->dump());
    };
    const bool tip = role == Qt::ToolTipRole;
    switch (index.column()) {
    case NameColumn: return text({"identity", "config", "name"});
    case CreatedColumn: return QString::fromStdString(r.created);
    case ModelColumn: return tip ? text({"paths", "model"}) : QFileInfo(text({"paths", "model"})).fileName();
    case DtypeColumn: return text({"identity", "config", "model", "dtypes"});
    case DatasetColumn: return tip ? text({"paths", "dataset"}) : QFileInfo(text({"paths", "dataset"})).fileName();
    case ItemsColumn: return static_cast<qlonglong>(r.itemsDone);
    case RunIdColumn: return QString::fromStdString(r.runId);
    }
    return {};
}

}  // namespace kvscope::widgets
