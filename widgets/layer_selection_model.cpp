// SPDX-License-Identifier: MIT
#include "widgets/layer_selection_model.h"

namespace kvscope::widgets {

LayerSelectionModel::LayerSelectionModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerSelectionModel::setLayerCount(int layers) {
    beginResetModel();
    keys_.assign(static_cast<std::size_t>(layers), false);
    values_.assign(static_cast<std::size_t>(layers), false);
    endResetModel();
    emit selectionChanged();
}

void LayerSelectionModel::selectRange(int begin, int end, bool keys, bool values) {
    for (int l = 0; l < layerCount(); ++l) {
        const bool inside = l >= begin && l < end;
        keys_[static_cast<std::size_t>(l)] = inside && keys;
        values_[static_cast<std::size_t>(l)] = inside && values;
    }
    if (layerCount() > 0)
        emit dataChanged(index(0, KeysColumn), index(layerCount() - 1, ValuesColumn), {Qt::CheckStateRole});
    emit selectionChanged();
}

std::vector<int64_t> LayerSelectionModel::layersWithKeys() const {
    std::vector<int64_t> out;
    for (int l = 0; l < layerCount(); ++l)
        if (keys_[static_cast<std::size_t>(l)]) out.push_back(l);
    return out;
}

std::vector<int64_t> LayerSelectionModel::layersWithValues() const {
    std::vector<int64_t> out;
    for (int l = 0; l < layerCount(); ++l)
        if (values_[static_cast<std::size_t>(l)]) out.push_back(l);
    return out;
}

int LayerSelectionModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : layerCount(); }
int LayerSelectionModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : NUM_COLUMNS; }

QVariant LayerSelectionModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= layerCount()) return {};
    const auto row = static_cast<std::size_t>(index.row());
    if (index.column() == LayerColumn)
        return role == Qt::DisplayRole ? QVariant(tr("layer %1").arg(index.row())) : QVariant();
    if (role != Qt::CheckStateRole) return {};
    const bool on = index.column() == KeysColumn ? keys_[row] : values_[row];
    return on ? Qt::Checked : Qt::Unchecked;
}

bool LayerSelectionModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    if (!index.isValid() || role != Qt::CheckStateRole || index.column() == LayerColumn || index.row() >= layerCount())
        return false;
    const bool on = value.toInt() == Qt::Checked;
    (index.column() == KeysColumn ? keys_ : values_)[static_cast<std::size_t>(index.row())] = on;
    emit dataChanged(index, index, {Qt::CheckStateRole});
    emit selectionChanged();
    return true;
}

Qt::ItemFlags LayerSelectionModel::flags(const QModelIndex& index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (index.column() != LayerColumn) f |= Qt::ItemIsUserCheckable;
    return f;
}

QVariant LayerSelectionModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case LayerColumn: return tr("Layer");
    case KeysColumn: return tr("K");
    case ValuesColumn: return tr("V");
    }
    return {};
}

}  // namespace kvscope::widgets
