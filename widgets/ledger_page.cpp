// SPDX-License-Identifier: MIT
#include "widgets/ledger_page.h"

#include "widgets/item_table_model.h"
#include "widgets/ledger_summary_view.h"
#include "widgets/run_table_model.h"

#include "core/util/error.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>

namespace kvscope::widgets {

LedgerPage::LedgerPage(QWidget* parent)
    : QWidget(parent), runs_(new RunTableModel(this)), items_(new ItemTableModel(this)),
      proxy_(new ItemFilterProxy(this)) {
    proxy_->setSourceModel(items_);
    setupViews();
}

void LedgerPage::setupViews() {
    auto* layout = new QVBoxLayout(this);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    runView_ = new QTableView(splitter);
    runView_->setModel(runs_);
    runView_->setSelectionBehavior(QAbstractItemView::SelectRows);
    runView_->setSelectionMode(QAbstractItemView::SingleSelection);
    runView_->horizontalHeader()->setStretchLastSection(true);
    runView_->verticalHeader()->hide();

    auto* itemsBox = new QWidget(splitter);
    auto* itemsLayout = new QVBoxLayout(itemsBox);
    itemsLayout->setContentsMargins(0, 0, 0, 0);
    summary_ = new LedgerSummaryView(itemsBox);
    itemsLayout->addWidget(summary_);
    auto* bar = new QWidget(itemsBox);
    setupFilters(bar);
    itemsLayout->addWidget(bar);
    itemView_ = new QTableView(itemsBox);
    itemView_->setModel(proxy_);
    itemView_->setSortingEnabled(true);
    itemView_->sortByColumn(ItemTableModel::IdColumn, Qt::AscendingOrder);
    itemView_->setSelectionBehavior(QAbstractItemView::SelectRows);
    itemView_->setSelectionMode(QAbstractItemView::SingleSelection);
    itemView_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    itemView_->verticalHeader()->hide();
    itemsLayout->addWidget(itemView_, 1);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 4);
    layout->addWidget(splitter);

    connect(runView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& current) { showRun(current.row()); });
    connect(itemView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &LedgerPage::onItemRowChanged);
}

void LedgerPage::setupFilters(QWidget* bar) {
    auto* row = new QHBoxLayout(bar);
    row->setContentsMargins(0, 0, 0, 0);
    auto* divergent = new QCheckBox(tr("Divergent only"), bar);
    auto* flipped = new QCheckBox(tr("Correctness flipped"), bar);
    auto* protocol = new QComboBox(bar);
    protocol->addItem(tr("any protocol"), QString());
    for (const char* p : {"matched", "fixed_prefix_2x2", "bridge", "audit", "transplant", "localize"})
        protocol->addItem(QString::fromLatin1(p), QString::fromLatin1(p));
    counts_ = new QLabel(bar);
    row->addWidget(divergent);
    row->addWidget(flipped);
    row->addWidget(protocol);
    row->addStretch(1);
    row->addWidget(counts_);
    auto updateCounts = [this] {
        const ItemRange& r = proxy_->range();
        const QString range = !r.active ? QString()
                              : r.measure == ItemMeasure::FirstDivergence
                                  ? tr(" (first divergence %1-%2)").arg(r.lower).arg(std::ceil(r.upper) - 1)
                                  : tr(" (margin %1 to %2)").arg(r.lower, 0, 'g', 3).arg(r.upper, 0, 'g', 3);
        counts_->setText(tr("%1 of %2 items%3").arg(proxy_->rowCount()).arg(items_->rowCount()).arg(range));
    };
    connect(divergent, &QCheckBox::toggled, proxy_, &ItemFilterProxy::setDivergentOnly);
    connect(flipped, &QCheckBox::toggled, proxy_, &ItemFilterProxy::setFlippedOnly);
    connect(protocol, &QComboBox::currentIndexChanged, this,
            [this, protocol] { proxy_->setProtocol(protocol->currentData().toString()); });
    connect(summary_, &LedgerSummaryView::rangeChanged, proxy_, &ItemFilterProxy::setRange);
    connect(proxy_, &QAbstractItemModel::rowsInserted, this, updateCounts);
    connect(proxy_, &QAbstractItemModel::rowsRemoved, this, updateCounts);
    connect(proxy_, &QAbstractItemModel::modelReset, this, updateCounts);
    connect(proxy_, &QAbstractItemModel::layoutChanged, this, updateCounts);
}

void LedgerPage::openLedger(const QString& path) {
    if (!QFileInfo(path).isFile()) throw UsageError(path.toStdString() + ": no such ledger file");
    const experiments::Ledger ledger(path.toStdString(), experiments::LedgerAccess::ReadOnly);
    runInfos_ = ledger.runs();
    if (runInfos_.empty()) throw UsageError(path.toStdString() + ": the ledger holds no run yet");
    path_ = path;
    runs_->setRuns(runInfos_);
    currentRun_ = -1;
    runView_->selectRow(static_cast<int>(runInfos_.size()) - 1);  // the newest, as `kvscope report` does
}

void LedgerPage::showRun(int row) {
    if (row < 0 || row >= static_cast<int>(runInfos_.size()) || row == currentRun_) return;
    currentRun_ = row;
    const experiments::Ledger ledger(path_.toStdString(), experiments::LedgerAccess::ReadOnly);
    items_->setItems(ledger.items(runInfos_[static_cast<std::size_t>(row)].runId));
    summary_->setItems(items_->items());
    proxy_->setRange({});
}

const experiments::RunInfo* LedgerPage::currentRun() const {
    return currentRun_ < 0 ? nullptr : &runInfos_[static_cast<std::size_t>(currentRun_)];
}

bool LedgerPage::selectItem(const QString& itemId) {
    const int sourceRow = items_->rowOfItem(itemId);
    if (sourceRow < 0) return false;
    const QModelIndex proxyIndex = proxy_->mapFromSource(items_->index(sourceRow, 0));
    if (!proxyIndex.isValid()) return false;  // filtered out
    itemView_->setCurrentIndex(proxyIndex);
    itemView_->scrollTo(proxyIndex);
    return true;
}

void LedgerPage::onItemRowChanged() {
    const QModelIndex current = itemView_->currentIndex();
    if (!current.isValid() || !currentRun()) return;
    const int sourceRow = proxy_->mapToSource(current).row();
    emit itemSelected(*currentRun(), items_->record(sourceRow));
}

}  // namespace kvscope::widgets
