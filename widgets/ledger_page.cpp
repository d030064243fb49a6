// SPDX-License-Identifier: MIT
#include "widgets/ledger_page.h"

#include "widgets/item_table_model.h"
#include "widgets/ledger_summary_view.h"
#include "widgets/replay_summary_view.h"
#include "widgets/run_table_model.h"
#include "widgets/trajectory_table_model.h"

#include "core/util/error.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableView>
#include <QVBoxLayout>

#include <cmath>

namespace kvscope::widgets {

LedgerPage::LedgerPage(QWidget* parent)
    : QWidget(parent), runs_(new RunTableModel(this)), items_(new ItemTableModel(this)),
      proxy_(new ItemFilterProxy(this)), trajectories_(new TrajectoryTableModel(this)),
      trajectoryProxy_(new QSortFilterProxyModel(this)) {
    proxy_->setSourceModel(items_);
    trajectoryProxy_->setSourceModel(trajectories_);
    trajectoryProxy_->setSortRole(TrajectoryTableModel::SortRole);
    setupViews();
}

namespace {
QTableView* itemTable(QAbstractItemModel* model, int sortColumn) {
    auto* view = new QTableView;
    view->setModel(model);
    view->setSortingEnabled(true);
    view->sortByColumn(sortColumn, Qt::AscendingOrder);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setSelectionMode(QAbstractItemView::SingleSelection);
    view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view->verticalHeader()->hide();
    return view;
}

// A run's items: `above` (its summary and controls) over `table`, which takes the rest.
QWidget* column(QWidget* parent, std::initializer_list<QWidget*> above, QTableView* table) {
    auto* box = new QWidget(parent);
    auto* layout = new QVBoxLayout(box);
    layout->setContentsMargins(0, 0, 0, 0);
    for (QWidget* w : above) layout->addWidget(w);
    layout->addWidget(table, 1);
    return box;
}
}  // namespace

void LedgerPage::setupViews() {
    auto* layout = new QVBoxLayout(this);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    runView_ = new QTableView(splitter);
    runView_->setModel(runs_);
    runView_->setSelectionBehavior(QAbstractItemView::SelectRows);
    runView_->setSelectionMode(QAbstractItemView::SingleSelection);
    runView_->horizontalHeader()->setStretchLastSection(true);
    runView_->verticalHeader()->hide();

    itemsStack_ = new QStackedWidget(splitter);
    studyItems_ = setupStudyItems(itemsStack_);
    importedItems_ = setupTrajectories(itemsStack_);
    itemsStack_->addWidget(studyItems_);
    itemsStack_->addWidget(importedItems_);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 4);
    layout->addWidget(splitter);

    connect(runView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& current) { showRun(current.row()); });
}

QWidget* LedgerPage::setupStudyItems(QWidget* parent) {
    summary_ = new LedgerSummaryView;
    auto* bar = new QWidget;
    setupFilters(bar);
    itemView_ = itemTable(proxy_, ItemTableModel::IdColumn);
    connect(itemView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, &LedgerPage::onItemRowChanged);
    return column(parent, {summary_, bar}, itemView_);
}

QWidget* LedgerPage::setupTrajectories(QWidget* parent) {
    replaySummary_ = new ReplaySummaryView;
    trajectoryView_ = itemTable(trajectoryProxy_, TrajectoryTableModel::IdColumn);
    connect(trajectoryView_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            &LedgerPage::onTrajectoryRowChanged);
    connect(replaySummary_, &ReplaySummaryView::basisChanged, this, [this](const experiments::DeltaBasis& basis) {
        trajectories_->setBasis(basis);
        emit basisChanged(basis);
    });
    return column(parent, {replaySummary_}, trajectoryView_);
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
    const experiments::RunInfo& run = runInfos_[static_cast<std::size_t>(row)];
    std::vector<experiments::ItemRecord> items = ledger.items(run.runId);
    if (experiments::isImportedRun(run.manifest)) {
        items_->setItems({});
        summary_->setItems({});
        trajectories_->setItems(items, replaySummary_->basis());
        replaySummary_->setItems(items);  // keeps the basis where this run has it; the table follows
        itemsStack_->setCurrentWidget(importedItems_);
        return;
    }
    trajectories_->setItems({}, {});
    items_->setItems(std::move(items));
    summary_->setItems(items_->items());
    proxy_->setRange({});
    itemsStack_->setCurrentWidget(studyItems_);
}

bool LedgerPage::showsImportedRun() const { return itemsStack_->currentWidget() == importedItems_; }

const experiments::DeltaBasis& LedgerPage::basis() const { return replaySummary_->basis(); }

const experiments::RunInfo* LedgerPage::currentRun() const {
    return currentRun_ < 0 ? nullptr : &runInfos_[static_cast<std::size_t>(currentRun_)];
}

bool LedgerPage::selectItem(const QString& itemId) {
    const bool imported = showsImportedRun();
    const int sourceRow = imported ? trajectories_->rowOfItem(itemId) : items_->rowOfItem(itemId);
    if (sourceRow < 0) return false;
    QAbstractProxyModel* proxy = imported ? static_cast<QAbstractProxyModel*>(trajectoryProxy_) : proxy_;
    QTableView* view = imported ? trajectoryView_ : itemView_;
    const QModelIndex proxyIndex = proxy->mapFromSource(proxy->sourceModel()->index(sourceRow, 0));
    if (!proxyIndex.isValid()) return false;  // filtered out
    view->setCurrentIndex(proxyIndex);
    view->scrollTo(proxyIndex);
    return true;
}

void LedgerPage::onItemRowChanged() {
    const QModelIndex current = itemView_->currentIndex();
    if (!current.isValid() || !currentRun()) return;
    const int sourceRow = proxy_->mapToSource(current).row();
    emit itemSelected(*currentRun(), items_->record(sourceRow));
}

void LedgerPage::onTrajectoryRowChanged() {
    const QModelIndex current = trajectoryView_->currentIndex();
    if (!current.isValid() || !currentRun()) return;
    emit trajectorySelected(*currentRun(), trajectories_->record(trajectoryProxy_->mapToSource(current).row()));
}

}  // namespace kvscope::widgets
