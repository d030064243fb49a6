// SPDX-License-Identifier: MIT
#include "widgets/item_table_model.h"

#include <cmath>

namespace kvscope::widgets {

using experiments::ItemRecord;

namespace item_results {

bool divergent(const ItemRecord& item) { return item.results.divergent(); }

int firstDivergence(const ItemRecord& item) {
    const auto& m = item.results.matched;
    return m && m->firstDivergence ? static_cast<int>(*m->firstDivergence) : -1;
}

bool flipped(const ItemRecord& item) { return item.results.matched && item.results.matched->labelFlipped(); }

QString transplantVerdict(const ItemRecord& item) {
    if (!item.results.transplant) return {};
    const bool intoPrefill = item.results.transplant->prefillFromLive.followsDonor;
    const bool intoLive = item.results.transplant->liveFromPrefill.followsDonor;
    if (intoPrefill && intoLive) return QObject::tr("follows donor");
    if (!intoPrefill && !intoLive) return QObject::tr("does not follow donor");
    return intoPrefill ? QObject::tr("follows donor: prefill<-live only")
                       : QObject::tr("follows donor: live<-prefill only");
}

}  // namespace item_results

bool ItemRange::contains(const ItemRecord& item) const {
    if (!active) return true;
    const std::optional<double> v = item_results::measureOf(item, measure);
    return v && *v >= lower && *v < upper;
}

namespace {

QVariant yesNo(bool value) { return value ? QObject::tr("yes") : QObject::tr("no"); }

// A matched flag as "yes"/"no", empty where the item has no matched result.
QVariant matchedFlag(const ItemRecord& item, bool experiments::MatchedResult::* flag) {
    return item.results.matched ? yesNo((*item.results.matched).*flag) : QVariant();
}

QVariant localizeText(const experiments::LocalizeResult& l) {
    if (!l.found) return QObject::tr("none found");
    if (l.layers.empty()) return {};
    const QString range = l.layers.size() == 1 ? QString::number(l.layers.front())
                                               : QStringLiteral("%1-%2").arg(l.layers.front()).arg(l.layers.back());
    return QStringLiteral("%1 (%2)").arg(range, QString::fromStdString(kvPartsName(l.parts)));
}

}  // namespace

ItemTableModel::ItemTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void ItemTableModel::setItems(std::vector<ItemRecord> items) {
    beginResetModel();
    items_ = std::move(items);
    endResetModel();
}

int rowOfItemId(const std::vector<ItemRecord>& items, const QString& itemId) {
    const std::string id = itemId.toStdString();
    for (std::size_t i = 0; i < items.size(); ++i)
        if (items[i].itemId == id) return static_cast<int>(i);
    return -1;
}

int ItemTableModel::rowOfItem(const QString& itemId) const { return rowOfItemId(items_, itemId); }

int ItemTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(items_.size());
}
int ItemTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : NUM_COLUMNS; }

QVariant ItemTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case IdColumn: return tr("Item");
    case SuffixesEqualColumn: return tr("Suffixes equal");
    case FirstDivergenceColumn: return tr("First divergence");
    case MarginColumn: return tr("Margin at divergence");
    case CorrectLiveColumn: return tr("Correct (live)");
    case CorrectPrefillColumn: return tr("Correct (prefill)");
    case ReplicasColumn: return tr("Replicas exact");
    case BridgeColumn: return tr("Bridge exact");
    case TransplantColumn: return tr("Transplant");
    case LocalizeColumn: return tr("Sufficient layers");
    }
    return {};
}

QVariant ItemTableModel::display(const ItemRecord& item, int column) const {
    using experiments::MatchedResult;
    const experiments::ItemResults& r = item.results;
    switch (column) {
    case IdColumn: return QString::fromStdString(item.itemId);
    case SuffixesEqualColumn:
        return item.status == experiments::ItemStatus::NoBoundary ? tr("no boundary")
                                                                  : matchedFlag(item, &MatchedResult::suffixEqual);
    case FirstDivergenceColumn: {
        const int d = item_results::firstDivergence(item);
        return d < 0 ? QVariant() : QVariant(d);
    }
    case MarginColumn: {
        const auto m = item_results::measureOf(item, ItemMeasure::MarginAtDivergence);
        return m ? QVariant(QString::number(*m, 'g', 4)) : QVariant();
    }
    case CorrectLiveColumn: return matchedFlag(item, &MatchedResult::correctLive);
    case CorrectPrefillColumn: return matchedFlag(item, &MatchedResult::correctPrefill);
    case ReplicasColumn: {
        if (!r.matched) return {};
        const QVariant a = yesNo(r.matched->replicaLiveExact), b = yesNo(r.matched->replicaPrefillExact);
        return a == b ? a : QVariant(tr("live %1, prefill %2").arg(a.toString(), b.toString()));
    }
    case BridgeColumn: return r.bridge ? yesNo(r.bridge->exact) : QVariant();
    case TransplantColumn: return item_results::transplantVerdict(item);
    case LocalizeColumn: return r.localize ? localizeText(*r.localize) : QVariant();
    }
    return {};
}

QVariant ItemTableModel::sortKey(const ItemRecord& item, int column) const {
    switch (column) {
    case IdColumn: return static_cast<qlonglong>(item.index);
    case FirstDivergenceColumn: return item_results::firstDivergence(item);
    case MarginColumn: {
        const auto m = item_results::measureOf(item, ItemMeasure::MarginAtDivergence);
        return m ? *m : 1e300;
    }
    default: return display(item, column);
    }
}

QVariant ItemTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount() || index.column() >= NUM_COLUMNS) return {};
    const ItemRecord& item = items_[static_cast<std::size_t>(index.row())];
    switch (role) {
    case Qt::DisplayRole: return display(item, index.column());
    case SortRole: return sortKey(item, index.column());
    case RecordRowRole: return index.row();
    case DivergentRole: return item_results::divergent(item);
    case FlippedRole: return item_results::flipped(item);
    case ProtocolsRole: {
        QStringList names;
        for (const std::string& name : item.results.protocols()) names << QString::fromStdString(name);
        return names;
    }
    case Qt::TextAlignmentRole:
        return index.column() == FirstDivergenceColumn || index.column() == MarginColumn
                   ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
                   : QVariant();
    }
    return {};
}

ItemFilterProxy::ItemFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
    setSortRole(ItemTableModel::SortRole);
}

void ItemFilterProxy::setDivergentOnly(bool on) {
    divergentOnly_ = on;
    invalidateFilter();
}

void ItemFilterProxy::setFlippedOnly(bool on) {
    flippedOnly_ = on;
    invalidateFilter();
}

void ItemFilterProxy::setProtocol(const QString& protocol) {
    protocol_ = protocol;
    invalidateFilter();
}

void ItemFilterProxy::setRange(const ItemRange& range) {
    range_ = range;
    invalidateFilter();
}

bool ItemFilterProxy::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
    const QModelIndex index = sourceModel()->index(sourceRow, 0, sourceParent);
    if (divergentOnly_ && !index.data(ItemTableModel::DivergentRole).toBool()) return false;
    if (flippedOnly_ && !index.data(ItemTableModel::FlippedRole).toBool()) return false;
    if (!protocol_.isEmpty() && !index.data(ItemTableModel::ProtocolsRole).toStringList().contains(protocol_))
        return false;
    if (range_.active) {
        const auto* items = qobject_cast<const ItemTableModel*>(sourceModel());
        if (!items || !range_.contains(items->record(sourceRow))) return false;
    }
    return true;
}

}  // namespace kvscope::widgets
