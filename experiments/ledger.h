// SPDX-License-Identifier: MIT
#pragma once
// The SQLite ledger: runs (identified by their frozen manifest), finished items with their
// per-protocol results, trajectories (token id blobs), fingerprints and timings. WAL mode and one
// transaction per finished item: a killed process loses at most the item in flight, and a resume
// neither repeats nor skips items. The schema is versioned; an unknown version is refused.
#include "experiments/item_result.h"
#include "core/model/numerics.h"
#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

struct sqlite3;

namespace kvscope::experiments {

struct RunInfo {
    std::string runId;
    nlohmann::json manifest;
    std::string created;
    int64_t itemsDone = 0;
};

// What readers of a run show and reopen, typed: the GUI's and the report's view of a manifest
// (fields an older ledger lacks stay empty).
struct RunDescription {
    std::string name;
    std::string experimentPath, modelPath, datasetPath;  // where the run found its inputs
    std::vector<std::string> dtypes;                     // the main precision first
    std::string device;
    Kernels kernels = Kernels::Torch;                    // runs from before the choice existed used torch's
};
RunDescription describeRun(const nlohmann::json& manifest);

struct ItemRecord {
    std::string itemId;
    int64_t index = 0;  // position in the dataset
    ItemStatus status = ItemStatus::Done;
    ItemResults results;
    Trajectories trajectories;
    Fingerprints fingerprints;
    double seconds = 0;
    int64_t tokens = 0;                // tokens decoded for this item
    // Where this run of the item spent its time (trace, prefill side, replay, each protocol); the
    // run's summary, not the ledger (a replay's times differ, its results must not).
    std::map<std::string, double> secondsBy;
};

// An item's stored trajectory by its ledger name ("prompt", "suffix_live", "output"); FormatError
// naming `where` and the item where it is missing or empty.
const std::vector<int64_t>& storedTrajectory(const ItemRecord& item, const std::string& name, const std::string& where);

enum class LedgerAccess {
    Write,     // creates the file and the schema when missing (run, merge's output)
    ReadOnly,  // report, audit, merge's inputs, the GUI: never writes; refuses a file that is not a ledger
};

class Ledger {
public:
    static constexpr int kSchemaVersion = 1;

    // FormatError for a bad or newer file; with ReadOnly also for a missing file or any SQLite file
    // without kvscope's schema (which Write would have turned into a ledger).
    explicit Ledger(const std::string& path, LedgerAccess access = LedgerAccess::Write);
    ~Ledger();
    Ledger(const Ledger&) = delete;
    Ledger& operator=(const Ledger&) = delete;

    const std::string& path() const { return path_; }
    std::vector<RunInfo> runs() const;
    bool hasRun(const std::string& runId) const;
    RunInfo run(const std::string& runId) const;  // UsageError if absent
    void createRun(const std::string& runId, const nlohmann::json& manifest);

    std::set<std::string> finishedItems(const std::string& runId) const;
    void recordItem(const std::string& runId, const ItemRecord& item);  // one transaction
    // A run and all its items in one transaction (kvscope import: nothing partial is stored).
    void recordRun(const std::string& runId, const nlohmann::json& manifest, const std::vector<ItemRecord>& items);
    // One more protocol's result for a stored item (a replay of imported trajectories), one transaction.
    void recordResult(const std::string& runId, const std::string& itemId, const std::string& protocol,
                      const nlohmann::json& data);
    std::set<std::string> itemsWithResult(const std::string& runId, const std::string& protocol) const;
    std::vector<ItemRecord> items(const std::string& runId) const;      // in dataset order
    // For tests and audits of tampering: overwrite one stored trajectory.
    void overwriteTrajectory(const std::string& runId, const std::string& itemId, const std::string& name,
                             const std::vector<int64_t>& ids);

    // Copies every run and item of `other` into this ledger; the same item twice must be identical.
    // A run of the same experiment on the same inputs in another environment (another libtorch, CPU
    // or thread count: another run id) is refused naming both environments, or with
    // allowMixedEnvironments its items join this ledger's run, whose manifest then lists every
    // environment under "mixed_environments".
    void mergeFrom(const Ledger& other, bool allowMixedEnvironments = false);
    void replaceManifest(const std::string& runId, const nlohmann::json& manifest);
    // A consistent copy of the whole database in a new file at `path` (SQLite's VACUUM INTO).
    void snapshotTo(const std::string& path) const;

private:
    // The run of this ledger that `incoming` (a run of the ledger at `source`) merges into; creates it
    // where there is none. mergeFrom says what it refuses.
    std::string mergeTarget(const RunInfo& incoming, const std::string& source, bool allowMixedEnvironments);
    void exec(const std::string& sql) const;
    template <typename Body>
    void inTransaction(Body body);
    void insertItem(const std::string& runId, const ItemRecord& item);
    void insertResult(const std::string& runId, const std::string& itemId, const std::string& protocol,
                      const nlohmann::json& data);
    void openDatabase(LedgerAccess access);
    void checkOrCreateSchema(LedgerAccess access);
    void enterWalMode();
    std::string readSchemaVersion() const;    // storedSchemaVersion, its errors named as unreadable()
    std::string storedSchemaVersion() const;  // empty when the meta table or its row is missing
    void checkSchemaVersion(const std::string& version) const;  // FormatError unless kSchemaVersion
    FormatError unreadable() const;
    static constexpr std::chrono::milliseconds kBusyTimeout{10000};
    std::string path_;
    sqlite3* db_ = nullptr;
};

// One writer per ledger. A run (or a merge) holds an exclusive flock on LEDGER.lock, which records
// its PID; a second writer is refused at once with that PID instead of computing the same items and
// dying on a UNIQUE constraint. The kernel drops the lock when the holder exits, however it exits, so
// a killed run never leaves a stale lock behind (the file itself stays, empty of meaning).
class LedgerWriteLock {
public:
    explicit LedgerWriteLock(const std::string& ledgerPath);  // UsageError naming the holder's PID
    // Releases the lock; removes LEDGER.lock too where no LEDGER exists (a run or merge that failed
    // before writing one leaves nothing behind).
    ~LedgerWriteLock();
    LedgerWriteLock(const LedgerWriteLock&) = delete;
    LedgerWriteLock& operator=(const LedgerWriteLock&) = delete;

private:
    std::string ledgerPath_;
    int fd_ = -1;
};

// `ledger merge`: the runs and items of every input ledger added to OUT (created if missing), under
// OUT's write lock, in OUT.partial renamed over OUT only when complete. Returns OUT's runs.
struct MergeOptions {
    bool allowMixedEnvironments = false;  // Ledger::mergeFrom
};
std::vector<RunInfo> mergeLedgers(const std::string& outPath, const std::vector<std::string>& inputs,
                                  const MergeOptions& options = {});

}  // namespace kvscope::experiments
