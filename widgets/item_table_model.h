// SPDX-License-Identifier: MIT
#pragma once
// The ledger's items as a table: one row per finished item, one column per headline result of the
// study. Whole-result setter (setItems) inside a model reset; sorting and filtering by ItemFilterProxy.
#include "experiments/ledger.h"
#include "experiments/report.h"

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include <optional>
#include <vector>

namespace kvscope::widgets {

using experiments::ItemMeasure;

// The items whose measure lies in [lower, upper); `active` false means no range filter.
struct ItemRange {
    bool active = false;
    ItemMeasure measure = ItemMeasure::FirstDivergence;
    double lower = 0, upper = 0;
    bool contains(const experiments::ItemRecord& item) const;
};

class ItemTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Columns {
        IdColumn,
        SuffixesEqualColumn,
        FirstDivergenceColumn,
        MarginColumn,          // top-1 minus top-2 logit at the divergence (live side)
        CorrectLiveColumn,
        CorrectPrefillColumn,
        ReplicasColumn,
        BridgeColumn,
        TransplantColumn,
        LocalizeColumn,
        NUM_COLUMNS
    };
    enum Roles {
        SortRole = Qt::UserRole,  // numbers for numeric columns, so sorting is not lexical
        RecordRowRole,            // row in items() (stable under proxies)
        DivergentRole,            // bool: suffixes differ
        FlippedRole,              // bool: correctness differs between live and prefill
        ProtocolsRole,            // QStringList of the protocols with results
    };

    explicit ItemTableModel(QObject* parent = nullptr);
    void setItems(std::vector<experiments::ItemRecord> items);
    const std::vector<experiments::ItemRecord>& items() const { return items_; }
    const experiments::ItemRecord& record(int row) const { return items_.at(static_cast<std::size_t>(row)); }
    int rowOfItem(const QString& itemId) const;  // -1 when absent

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QVariant display(const experiments::ItemRecord& item, int column) const;
    QVariant sortKey(const experiments::ItemRecord& item, int column) const;
    std::vector<experiments::ItemRecord> items_;
};

// Filters: divergent only, correctness flipped only, has results of one protocol.
class ItemFilterProxy : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit ItemFilterProxy(QObject* parent = nullptr);
    void setDivergentOnly(bool on);
    void setFlippedOnly(bool on);
    void setProtocol(const QString& protocol);  // empty: any
    void setRange(const ItemRange& range);       // a histogram bar's items only (inactive: all)
    const ItemRange& range() const { return range_; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    bool divergentOnly_ = false, flippedOnly_ = false;
    QString protocol_;
    ItemRange range_;
};

// The row of the item `itemId` in `items`, -1 when absent (the item models' rowOfItem).
int rowOfItemId(const std::vector<experiments::ItemRecord>& items, const QString& itemId);

// Helpers over one record's JSON results, shared by the views.
namespace item_results {
bool divergent(const experiments::ItemRecord& item);
int firstDivergence(const experiments::ItemRecord& item);  // -1 when equal or not run
bool flipped(const experiments::ItemRecord& item);
QString transplantVerdict(const experiments::ItemRecord& item);  // "follows donor (both ways)", ...
using experiments::measureOf;
}  // namespace item_results

}  // namespace kvscope::widgets
