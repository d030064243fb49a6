// SPDX-License-Identifier: MIT
#include "widgets/item_table_model.h"

#include "widgets/json_path.h"

namespace kvscope::widgets {

using experiments::ItemRecord;
using nlohmann::json;

namespace item_results {

namespace {
std::optional<bool> flag(const ItemRecord& item, std::initializer_list<const char*> path) {
    const json* j = jsonAt(item.results, path);
    return j && j->is_boolean() ? std::optional<bool>(j->get<bool>()) : std::nullopt;
}
}  // namespace

bool divergent(const ItemRecord& item) { return flag(item, {"matched", "suffix_equal"}) == false; }

int firstDivergence(const ItemRecord& item) {
    const json* j = jsonAt(item.results, {"matched", "first_divergence"});
    return j && j->is_number_integer() ? j->get<int>() : -1;
}

bool flipped(const ItemRecord& item) {
    const auto live = flag(item, {"matched", "correct_live"}), prefill = flag(item, {"matched", "correct_prefill"});
    return live && prefill && *live != *prefill;
}

QString transplantVerdict(const ItemRecord& item) {
    const auto intoPrefill = flag(item, {"transplant", "prefill_from_live", "follows_donor"});
    const auto intoLive = flag(item, {"transplant", "live_from_prefill", "follows_donor"});
    if (!intoPrefill || !intoLive) return {};
    if (*intoPrefill && *intoLive) return QObject::tr("follows donor");
    if (!*intoPrefill && !*intoLive) return QObject::tr("does not follow donor");
    return *intoPrefill ? QObject::tr("follows donor: prefill<-live only")
                        : QObject::tr("follows donor: live<-prefill only");
}

std::optional<double> measureOf(const ItemRecord& item, ItemMeasure measure) {
    const int step = firstDivergence(item);
    if (step < 0) return std::nullopt;
    if (measure == ItemMeasure::FirstDivergence) return step;
    const json* m = jsonAt(item.results, {"matched", "at_divergence", "live", "margin"});
    return m && m->is_number() ? std::optional<double>(m->get<double>()) : std::nullopt;
}

}  // namespace item_results

bool ItemRange::contains(const ItemRecord& item) const {
    if (!active) return true;
    const std::optional<double> v = item_results::measureOf(item, measure);
    return v && *v >= lower && *v < upper;
}

namespace {
QVariant yesNo(const json& results, std::initializer_list<const char*> path) {
    const json* at = jsonAt(results, path);
    if (!at || !at->is_boolean()) return {};
    return at->get<bool>() ? QObject::tr("yes") : QObject::tr("no");
}

}  // namespace

ItemTableModel::ItemTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void ItemTableModel::setItems(std::vector<ItemRecord> items) {
    beginResetModel();
    items_ = std::move(items);
    endResetModel();
}

int ItemTableModel::rowOfItem(const QString& itemId) const {
    for (std::size_t i = 0; i < items_.size(); ++i)
        if (QString::fromStdString(items_[i].itemId) == itemId) return static_cast<int>(i);
    return -1;
}

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
    const json& r = item.results;
    switch (column) {
    case IdColumn: return QString::fromStdString(item.itemId);
    case SuffixesEqualColumn:
        return item.status == "no_boundary" ? tr("no boundary") : yesNo(r, {"matched", "suffix_equal"});
    case FirstDivergenceColumn: {
        const int d = item_results::firstDivergence(item);
        return d < 0 ? QVariant() : QVariant(d);
    }
    case MarginColumn: {
        const auto m = item_results::measureOf(item, ItemMeasure::MarginAtDivergence);
        return m ? QVariant(QString::number(*m, 'g', 4)) : QVariant();
    }
    case CorrectLiveColumn: return yesNo(r, {"matched", "correct_live"});
    case CorrectPrefillColumn: return yesNo(r, {"matched", "correct_prefill"});
    case ReplicasColumn: {
        const QVariant a = yesNo(r, {"matched", "replica_live_exact"}),
                       b = yesNo(r, {"matched", "replica_prefill_exact"});
        if (!a.isValid() || !b.isValid()) return {};
        return a == b ? a : QVariant(tr("live %1, prefill %2").arg(a.toString(), b.toString()));
    }
    case BridgeColumn: return yesNo(r, {"bridge", "exact"});
    case TransplantColumn: return item_results::transplantVerdict(item);
    case LocalizeColumn: {
        if (!r.contains("localize")) return {};
        const json& l = r["localize"];
        if (!l.value("found", false)) return tr("none found");
        const auto layers = l.value("layers", std::vector<int64_t>());
        if (layers.empty()) return {};
        const QString range = layers.size() == 1 ? QString::number(layers.front())
                                                 : QStringLiteral("%1-%2").arg(layers.front()).arg(layers.back());
        return QStringLiteral("%1 (%2)").arg(range, QString::fromStdString(l.value("kv", std::string())));
    }
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
        for (const auto& [name, value] : item.results.items()) names << QString::fromStdString(name);
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
