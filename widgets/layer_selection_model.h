// SPDX-License-Identifier: MIT
#pragma once
// The transplant checklist: one row per layer with a checkable K and a checkable V column.
#include <QAbstractTableModel>

#include <cstdint>
#include <vector>

namespace kvscope::widgets {

class LayerSelectionModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns { LayerColumn, KeysColumn, ValuesColumn, NUM_COLUMNS };

    explicit LayerSelectionModel(QObject* parent = nullptr);
    void setLayerCount(int layers);  // everything unchecked
    int layerCount() const { return static_cast<int>(keys_.size()); }

    // Presets. `range` selects layers [begin, end) for K and/or V and clears the rest.
    void selectRange(int begin, int end, bool keys, bool values);
    void selectAll() { selectRange(0, layerCount(), true, true); }
    void selectNone() { selectRange(0, 0, false, false); }
    void selectFirstHalf() { selectRange(0, layerCount() / 2, true, true); }
    void selectSecondHalf() { selectRange(layerCount() / 2, layerCount(), true, true); }

    std::vector<int64_t> layersWithKeys() const;
    std::vector<int64_t> layersWithValues() const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

signals:
    void selectionChanged();

private:
    std::vector<bool> keys_, values_;
};

}  // namespace kvscope::widgets
