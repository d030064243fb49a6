// SPDX-License-Identifier: MIT
#include "experiments/ledger.h"

#include "experiments/manifest.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/fault_injection.h"
#include "core/util/file_names.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <thread>

namespace kvscope::experiments {
namespace {

// A prepared statement with RAII and typed binds.
class Statement {
public:
    Statement(sqlite3* db, const std::string& sql, const std::string& path) : path_(path) {
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
            throw FormatError(path + ": SQL error (" + sqlite3_errmsg(db) + ") in: " + sql);
    }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement& bind(int i, const std::string& s) {
        sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
        return *this;
    }
    Statement& bind(int i, int64_t v) {
        sqlite3_bind_int64(stmt_, i, v);
        return *this;
    }
    Statement& bind(int i, double v) {
        sqlite3_bind_double(stmt_, i, v);
        return *this;
    }
    Statement& bindIds(int i, const std::vector<int64_t>& ids) {
        sqlite3_bind_blob(stmt_, i, ids.data(), static_cast<int>(ids.size() * sizeof(int64_t)), SQLITE_TRANSIENT);
        return *this;
    }
    bool step() {
        const int rc = sqlite3_step(stmt_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw FormatError(path_ + ": SQLite error: " + std::string(sqlite3_errmsg(sqlite3_db_handle(stmt_))));
    }
    std::string text(int col) const {
        auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
        return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
    }
    int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
    double real(int col) const { return sqlite3_column_double(stmt_, col); }
    std::vector<int64_t> ids(int col) const {
        const auto* p = static_cast<const int64_t*>(sqlite3_column_blob(stmt_, col));
        const auto n = static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)) / sizeof(int64_t);
        return p ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>();
    }

private:
    sqlite3_stmt* stmt_ = nullptr;
    std::string path_;
};

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, manifest TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items(run_id TEXT NOT NULL, item_id TEXT NOT NULL, item_index INTEGER NOT NULL,
  status TEXT NOT NULL, seconds REAL NOT NULL, tokens INTEGER NOT NULL, PRIMARY KEY(run_id, item_id));
CREATE TABLE IF NOT EXISTS results(run_id TEXT NOT NULL, item_id TEXT NOT NULL, protocol TEXT NOT NULL,
  data TEXT NOT NULL, PRIMARY KEY(run_id, item_id, protocol));
CREATE TABLE IF NOT EXISTS trajectories(run_id TEXT NOT NULL, item_id TEXT NOT NULL, name TEXT NOT NULL,
  ids BLOB NOT NULL, PRIMARY KEY(run_id, item_id, name));
CREATE TABLE IF NOT EXISTS fingerprints(run_id TEXT NOT NULL, item_id TEXT NOT NULL, name TEXT NOT NULL,
  value TEXT NOT NULL, PRIMARY KEY(run_id, item_id, name));
)sql";

std::string nowUtc() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

// `what` names the stored text: "LEDGER: run R's manifest", "LEDGER: run R, item 'I': matched result".
nlohmann::json parseStoredJson(const std::string& text, const std::string& what) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(what + " is not valid JSON (" + e.what() + ")");
    }
}

}  // namespace

Ledger::Ledger(const std::string& path, LedgerAccess access) : path_(path) {
    openDatabase(access);
    // Whatever refuses the file past this point (not a ledger, a newer schema, another writer holding
    // the database beyond the busy timeout), the connection is closed before the error leaves.
    try {
        checkOrCreateSchema(access);
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        throw;
    }
}

void Ledger::checkOrCreateSchema(LedgerAccess access) {
    if (access == LedgerAccess::ReadOnly) {
        const std::string version = readSchemaVersion();
        if (version.empty())
            throw FormatError(path_ +
                              ": not a kvscope ledger (an SQLite database without kvscope's meta.schema_version)");
        return checkSchemaVersion(version);
    }
    enterWalMode();
    // Two writers may open a path that does not exist yet at the same moment (a run and `ledger merge`,
    // or a resumed run): reading the version and writing it when missing is one write transaction, so
    // the second sees the first's row instead of inserting its own.
    exec("BEGIN IMMEDIATE");
    try {
        std::string version;
        try {
            exec(kSchema);
            version = storedSchemaVersion();
        } catch (const FormatError&) {
            throw unreadable();
        }
        if (version.empty())
            Statement(db_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)", path_)
                .bind(1, std::to_string(kSchemaVersion))
                .step();
        else
            checkSchemaVersion(version);
        exec("COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

std::string Ledger::readSchemaVersion() const {
    try {
        return storedSchemaVersion();
    } catch (const FormatError&) {
        throw unreadable();
    }
}

void Ledger::enterWalMode() {
    // Switching a new file to WAL needs its exclusive lock, and SQLite refuses that at once, without
    // the busy handler, while another connection holds any lock on the file (waiting could deadlock).
    // A second writer opening the same new file retries within the busy timeout instead of failing.
    const auto deadline = std::chrono::steady_clock::now() + kBusyTimeout;
    for (;;) {
        const int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
        if (rc == SQLITE_OK) break;
        if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline) throw unreadable();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    exec("PRAGMA synchronous=NORMAL");
}

FormatError Ledger::unreadable() const {
    // The connection's last error says why (e.g. "file is not a database", "database is locked").
    return FormatError(path_ + ": not a kvscope ledger (not a SQLite database, or unreadable: " + sqlite3_errmsg(db_) +
                       ")");
}

void Ledger::checkSchemaVersion(const std::string& version) const {
    if (version != std::to_string(kSchemaVersion))
        throw FormatError(path_ + ": ledger schema version " + version + " is not supported by this kvscope (expects " +
                          std::to_string(kSchemaVersion) + ")");
}

void Ledger::openDatabase(LedgerAccess access) {
    const int flags = access == LedgerAccess::Write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    fault::installSqliteHook();
    if (sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
        const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);  // a failed open still allocates a handle (NULL only when out of memory)
        db_ = nullptr;
        throw FormatError(path_ + ": cannot open ledger (" + msg + ")");
    }
    sqlite3_busy_timeout(db_, static_cast<int>(kBusyTimeout.count()));
}

std::string Ledger::storedSchemaVersion() const {
    // The statement must be finalised before a refusal closes the connection, or close leaks it.
    {
        Statement table(db_, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'", path_);
        if (!table.step()) return {};
    }
    Statement get(db_, "SELECT value FROM meta WHERE key='schema_version'", path_);
    return get.step() ? get.text(0) : std::string();
}

Ledger::~Ledger() {
    if (db_) sqlite3_close(db_);
}

void Ledger::exec(const std::string& sql) const {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        const std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw FormatError(path_ + ": SQLite error: " + msg);
    }
}

std::vector<RunInfo> Ledger::runs() const {
    std::vector<RunInfo> out;
    Statement s(db_,
                "SELECT r.run_id, r.manifest, r.created, (SELECT COUNT(*) FROM items i WHERE i.run_id = r.run_id) "
                "FROM runs r ORDER BY r.created, r.run_id",
                path_);
    while (s.step()) {
        const std::string runId = s.text(0);
        out.push_back(
            {runId, parseStoredJson(s.text(1), path_ + ": run " + runId + "'s manifest"), s.text(2), s.integer(3)});
    }
    return out;
}

bool Ledger::hasRun(const std::string& runId) const {
    Statement s(db_, "SELECT 1 FROM runs WHERE run_id = ?", path_);
    return s.bind(1, runId).step();
}

RunInfo Ledger::run(const std::string& runId) const {
    for (auto& r : runs())
        if (r.runId == runId) return r;
    throw UsageError(path_ + ": no run '" + runId + "' in this ledger");
}

void Ledger::createRun(const std::string& runId, const nlohmann::json& manifest) {
    Statement(db_, "INSERT INTO runs(run_id, manifest, created) VALUES(?, ?, ?)", path_)
        .bind(1, runId)
        .bind(2, manifest.dump())
        .bind(3, nowUtc())
        .step();
}

std::set<std::string> Ledger::finishedItems(const std::string& runId) const {
    std::set<std::string> out;
    Statement s(db_, "SELECT item_id FROM items WHERE run_id = ?", path_);
    s.bind(1, runId);
    while (s.step()) out.insert(s.text(0));
    return out;
}

// Runs `body` in one write transaction: all of it is stored, or (on any exception) none of it.
template <typename Body>
void Ledger::inTransaction(Body body) {
    exec("BEGIN IMMEDIATE");
    try {
        body();
        exec("COMMIT");
    } catch (...) {
        exec("ROLLBACK");
        throw;
    }
}

void Ledger::insertItem(const std::string& runId, const ItemRecord& item) {
    Statement(db_, "INSERT INTO items(run_id, item_id, item_index, status, seconds, tokens) VALUES(?,?,?,?,?,?)", path_)
        .bind(1, runId)
        .bind(2, item.itemId)
        .bind(3, item.index)
        .bind(4, itemStatusName(item.status))
        .bind(5, item.seconds)
        .bind(6, item.tokens)
        .step();
    const nlohmann::json results = toJson(item.results);
    for (auto it = results.begin(); it != results.end(); ++it) insertResult(runId, item.itemId, it.key(), it.value());
    for (const auto& [name, ids] : item.trajectories.byName())
        Statement(db_, "INSERT INTO trajectories(run_id, item_id, name, ids) VALUES(?,?,?,?)", path_)
            .bind(1, runId)
            .bind(2, item.itemId)
            .bind(3, name)
            .bindIds(4, ids)
            .step();
    for (const auto& [name, value] : item.fingerprints.byName())
        Statement(db_, "INSERT INTO fingerprints(run_id, item_id, name, value) VALUES(?,?,?,?)", path_)
            .bind(1, runId)
            .bind(2, item.itemId)
            .bind(3, name)
            .bind(4, value)
            .step();
}

void Ledger::insertResult(const std::string& runId, const std::string& itemId, const std::string& protocol,
                          const nlohmann::json& data) {
    Statement(db_, "INSERT INTO results(run_id, item_id, protocol, data) VALUES(?,?,?,?)", path_)
        .bind(1, runId)
        .bind(2, itemId)
        .bind(3, protocol)
        .bind(4, data.dump())
        .step();
}

void Ledger::recordItem(const std::string& runId, const ItemRecord& item) {
    inTransaction([&] { insertItem(runId, item); });
}

void Ledger::recordRun(const std::string& runId, const nlohmann::json& manifest, const std::vector<ItemRecord>& items) {
    inTransaction([&] {
        createRun(runId, manifest);
        for (const ItemRecord& item : items) insertItem(runId, item);
    });
}

void Ledger::recordResult(const std::string& runId, const std::string& itemId, const std::string& protocol,
                          const nlohmann::json& data) {
    inTransaction([&] { insertResult(runId, itemId, protocol, data); });
}

std::set<std::string> Ledger::itemsWithResult(const std::string& runId, const std::string& protocol) const {
    std::set<std::string> out;
    Statement s(db_, "SELECT item_id FROM results WHERE run_id = ? AND protocol = ?", path_);
    s.bind(1, runId).bind(2, protocol);
    while (s.step()) out.insert(s.text(0));
    return out;
}

std::vector<ItemRecord> Ledger::items(const std::string& runId) const {
    auto itemWhere = [&](const std::string& itemId) { return path_ + ": run " + runId + ", item '" + itemId + "'"; };
    std::vector<ItemRecord> out;
    std::map<std::string, std::size_t> at;
    Statement s(db_,
                "SELECT item_id, item_index, status, seconds, tokens FROM items WHERE run_id = ? ORDER BY item_index",
                path_);
    s.bind(1, runId);
    while (s.step()) {
        ItemRecord r;
        r.itemId = s.text(0);
        r.index = s.integer(1);
        r.status = parseItemStatus(s.text(2), itemWhere(r.itemId));
        r.seconds = s.real(3);
        r.tokens = s.integer(4);
        at[r.itemId] = out.size();
        out.push_back(std::move(r));
    }
    // A row of results, trajectories or fingerprints belongs to an item of the items table.
    auto itemOf = [&](const std::string& itemId, const char* table) -> ItemRecord& {
        const auto found = at.find(itemId);
        if (found == at.end())
            throw FormatError(itemWhere(itemId) + ": the ledger's " + table +
                              " table has a row for this item, which its items table lacks (a damaged ledger)");
        return out[found->second];
    };
    Statement res(db_, "SELECT item_id, protocol, data FROM results WHERE run_id = ?", path_);
    res.bind(1, runId);
    while (res.step()) {
        const std::string itemId = res.text(0);
        const std::string protocol = res.text(1);
        readProtocolResult(itemOf(itemId, "results").results, protocol,
                           parseStoredJson(res.text(2), itemWhere(itemId) + ": stored " + protocol + " result"),
                           itemWhere(itemId));
    }
    Statement tr(db_, "SELECT item_id, name, ids FROM trajectories WHERE run_id = ?", path_);
    tr.bind(1, runId);
    while (tr.step())
        if (!itemOf(tr.text(0), "trajectories").trajectories.set(tr.text(1), tr.ids(2)))
            throw FormatError(itemWhere(tr.text(0)) + ": unknown trajectory '" + tr.text(1) + "'");
    Statement fp(db_, "SELECT item_id, name, value FROM fingerprints WHERE run_id = ?", path_);
    fp.bind(1, runId);
    while (fp.step())
        if (!itemOf(fp.text(0), "fingerprints").fingerprints.set(fp.text(1), fp.text(2)))
            throw FormatError(itemWhere(fp.text(0)) + ": unknown fingerprint '" + fp.text(1) + "'");
    return out;
}

const std::vector<int64_t>& storedTrajectory(const ItemRecord& item, const std::string& name,
                                             const std::string& where) {
    const std::vector<int64_t>* ids = item.trajectories.find(name);
    if (!ids || ids->empty()) throw FormatError(where + ": item '" + item.itemId + "' has no " + name + " trajectory");
    return *ids;
}

void Ledger::overwriteTrajectory(const std::string& runId, const std::string& itemId, const std::string& name,
                                 const std::vector<int64_t>& ids) {
    Statement(db_, "UPDATE trajectories SET ids = ? WHERE run_id = ? AND item_id = ? AND name = ?", path_)
        .bindIds(1, ids)
        .bind(2, runId)
        .bind(3, itemId)
        .bind(4, name)
        .step();
}

void Ledger::snapshotTo(const std::string& path) const { Statement(db_, "VACUUM INTO ?", path_).bind(1, path).step(); }

void Ledger::replaceManifest(const std::string& runId, const nlohmann::json& manifest) {
    Statement(db_, "UPDATE runs SET manifest = ? WHERE run_id = ?", path_)
        .bind(1, manifest.dump())
        .bind(2, runId)
        .step();
}

std::string Ledger::mergeTarget(const RunInfo& incoming, const std::string& source, bool allowMixedEnvironments) {
    if (hasRun(incoming.runId)) {
        // Paths may differ between shards' machines; what the run is may not.
        if (run(incoming.runId).manifest.at("identity") != incoming.manifest.at("identity"))
            throw UsageError("run " + incoming.runId + " has different manifests in " + path_ + " and " + source);
        return incoming.runId;
    }
    for (RunInfo& mine : runs()) {
        if (!sameInputs(mine.manifest, incoming.manifest)) continue;
        const nlohmann::json theirs = environmentOf(incoming.manifest);
        if (!allowMixedEnvironments)
            throw UsageError(source + ": run " + incoming.runId + " is the experiment of run " + mine.runId + " in " +
                             path_ + " on the same inputs, but another environment decided its bits: it ran on " +
                             environmentText(theirs) + ", run " + mine.runId + " on " +
                             environmentText(environmentOf(mine.manifest)) +
                             "; pass --allow-mixed-environments to merge them into one run anyway");
        nlohmann::json& mixed = mine.manifest["mixed_environments"];
        if (mixed.is_null()) mixed.push_back(environmentOf(mine.manifest));
        if (std::find(mixed.begin(), mixed.end(), theirs) == mixed.end()) mixed.push_back(theirs);
        replaceManifest(mine.runId, mine.manifest);
        return mine.runId;
    }
    createRun(incoming.runId, incoming.manifest);
    return incoming.runId;
}

void Ledger::mergeFrom(const Ledger& other, bool allowMixedEnvironments) {
    for (const RunInfo& r : other.runs()) {
        const std::string target = mergeTarget(r, other.path(), allowMixedEnvironments);
        const auto have = finishedItems(target);
        const auto mine = items(target);
        for (const ItemRecord& item : other.items(r.runId)) {
            if (!have.count(item.itemId)) {
                recordItem(target, item);
                continue;
            }
            for (const auto& existing : mine)
                if (existing.itemId == item.itemId &&
                    (!sameResults(existing.results, item.results) || existing.trajectories != item.trajectories ||
                     existing.fingerprints != item.fingerprints))
                    throw UsageError("item '" + item.itemId + "' of run " + target + " differs between " + path_ +
                                     " and " + other.path());
        }
    }
}

namespace {

std::string lockHolder(int fd) {
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    const std::string pid = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
    return pid.empty() ? "another process" : "pid " + pid.substr(0, pid.find('\n'));
}

}  // namespace

LedgerWriteLock::LedgerWriteLock(const std::string& ledgerPath) : ledgerPath_(ledgerPath) {
    const std::string path = ledgerPath + ".lock";
    while (true) {
        fault::point("open of the ledger's lock file");
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) throw FormatError(path + ": cannot open the ledger's lock file (" + std::strerror(errno) + ")");
        if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            const std::string holder = lockHolder(fd_);
            ::close(fd_);
            fd_ = -1;
            throw UsageError(ledgerPath + ": another kvscope run (" + holder +
                             ") is writing this ledger; wait for it to finish or use another ledger");
        }
        // Whoever held the lock before may have replaced the file; a lock on a file no longer at
        // `path` excludes nobody, so take the one that is there now.
        struct stat held{}, current{};
        if (::fstat(fd_, &held) == 0 && ::stat(path.c_str(), &current) == 0 && held.st_ino == current.st_ino) break;
        ::close(fd_);
    }
    // Best effort: without the PID the lock still holds, and a refused writer says "another process".
    const std::string pid = std::to_string(::getpid()) + "\n";
    fault::point("write of the ledger's lock file");
    [[maybe_unused]] const bool recorded =
        ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
}

LedgerWriteLock::~LedgerWriteLock() {
    if (fd_ < 0) return;
    // Unlinked while still held: a writer that opened it meanwhile finds the file gone once it gets
    // the lock, and the constructor's loop takes a new one.
    if (!pathExists(ledgerPath_)) ::unlink((ledgerPath_ + ".lock").c_str());
    ::close(fd_);  // releases the lock; the next holder rewrites the PID
}

std::vector<RunInfo> mergeLedgers(const std::string& outPath, const std::vector<std::string>& inputs,
                                  const MergeOptions& options) {
    namespace fs = std::filesystem;
    const LedgerWriteLock lock(outPath);
    // The merge happens in OUT.partial, a snapshot of OUT (VACUUM INTO reads through OUT's WAL), and
    // replaces OUT only when complete: a merge that fails on a conflicting item or is killed leaves
    // OUT as it was, and its OUT.partial is discarded by the next merge.
    const std::string partial = outPath + ".partial";
    std::error_code ignored;
    // SQLite would replay a stale OUT.partial-wal onto the new OUT.partial: all of it goes.
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(partial + suffix, ignored);
    if (pathExists(outPath)) {
        Ledger(outPath, LedgerAccess::ReadOnly);  // refuses a file that is not a ledger before writing to it
        // A writer's connection: closing it checkpoints OUT's WAL and deletes OUT-wal, which would
        // otherwise be replayed onto the file renamed over OUT.
        Ledger(outPath).snapshotTo(partial);
    }
    std::vector<RunInfo> runs;
    try {
        Ledger merged(partial);
        for (const auto& input : inputs)
            merged.mergeFrom(Ledger(input, LedgerAccess::ReadOnly), options.allowMixedEnvironments);
        runs = merged.runs();
    } catch (...) {
        fs::remove(partial, ignored);
        throw;
    }
    fault::point("rename of a merged ledger into place");
    if (std::rename(partial.c_str(), outPath.c_str()) != 0)
        throw FormatError(outPath + ": cannot move the merged ledger into place");
    syncParentFolder(outPath);
    return runs;
}

RunDescription describeRun(const nlohmann::json& manifest) {
    auto text = [&](const nlohmann::json::json_pointer& at) {
        return manifest.contains(at) && manifest[at].is_string() ? manifest[at].get<std::string>() : std::string();
    };
    using Pointer = nlohmann::json::json_pointer;
    RunDescription d;
    d.name = text(Pointer("/identity/config/name"));
    d.experimentPath = text(Pointer("/paths/experiment"));
    d.modelPath = text(Pointer("/paths/model"));
    d.datasetPath = text(Pointer("/paths/dataset"));
    d.device = text(Pointer("/identity/config/model/device"));
    if (const std::string kernels = text(Pointer("/identity/config/model/kernels")); !kernels.empty())
        d.kernels = parseKernels(kernels);
    const Pointer dtypes("/identity/config/model/dtypes");
    if (manifest.contains(dtypes) && manifest[dtypes].is_array())
        for (const auto& dtype : manifest[dtypes])
            if (dtype.is_string()) d.dtypes.push_back(dtype.get<std::string>());
    return d;
}

}  // namespace kvscope::experiments
