// SPDX-License-Identifier: MIT
// Crash safety by fault injection (built with KVSCOPE_FAULT_INJECTION): a small run is ended by
// SIGKILL at each of its file-changing operations in turn (kvscope's own writes, fsyncs and renames
// and every SQLite write, sync, truncate and delete, through a VFS hook), then resumed; each time the
// ledger must equal an uninterrupted run's, pass `audit` and SQLite's integrity_check, and the kept
// caches must be the same bytes with no .partial file left over.
// The killed run is a `kvscope run` process; the resume and the audit call the engine functions
// behind `kvscope run` and `kvscope audit` (runExperiment, auditRun) in this process: the state
// on disk is what is under test, and every process pays libtorch's start-up (1.7 CPU-seconds of
// the 1.8 a small run takes, Debian's libtorch 1.13 on a Zen 3): three processes per fault point
// made this test most of the dev suite's time. The CLI's own resume is tested by
// RunCli.KilledMidRunThenResumedLosesAndRepeatsNothing.
#include "experiments/ledger.h"
#include "experiments/runner.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using test::runCli;
using test::shellQuote;

// Two items, a generated two-layer model (written by the run itself, so its writes are walked
// too), two protocols and kept caches: every kind of write a run does, in ~150 fault points.
void writeSmallExperiment(const test::TempDir& dir) {
    test::writeTextFile(dir.file("items.jsonl"),
                        "{\"id\": \"a\", \"prompt\": \"Q: what is 51 + 29?\\nStep 1:\", \"answer\": \"80\"}\n"
                        "{\"id\": \"b\", \"prompt\": \"Q: what is 60 + 93?\\nStep 1:\", \"answer\": \"153\"}\n");
    test::writeTextFile(dir.file("exp.toml"),
                        "name = \"crash-safety\"\n"
                        "[model]\ndir = \"model\"\ndtypes = [\"bf16\"]\nthreads = 1\n"
                        "[model.generate]\narch = \"qwen2\"\nseed = 5\nhidden_size = 32\nlayers = 2\n"
                        "heads = 2\nkv_heads = 1\nintermediate_size = 64\n"
                        "[dataset]\npath = \"items.jsonl\"\n"
                        "[generation]\nmax_new_tokens = 12\nignore_eos = true\n"
                        "[boundary]\nrule = \"fraction\"\nfraction = 0.5\n"
                        "[protocols]\nrun = [\"matched\", \"bridge\"]\n");
}

// What `kvscope run` with runCommand's arguments does after parsing them.
void resumeInProcess(const test::TempDir& dir) {
    experiments::RunOptions options;
    options.ledgerPath = dir.file("ledger.db");
    options.keepCachesDir = dir.file("caches");
    const std::atomic<bool> noStop{false};
    experiments::runExperiment(
        experiments::ExperimentConfig::load(dir.file("exp.toml")), options, [](const experiments::RunProgress&) {},
        noStop);
}

// `kvscope audit LEDGER`: "" when every item is reproduced, else the first mismatch.
std::string auditInProcess(const std::string& ledgerPath) {
    const experiments::Ledger ledger(ledgerPath, experiments::LedgerAccess::ReadOnly);
    std::string firstMismatch;
    const auto noteMismatch = [&](const experiments::ItemAudit& item) {
        if (firstMismatch.empty() && !item.mismatches.empty())
            firstMismatch = "item " + item.itemId + ": " + item.mismatches.front();
    };
    const auto s = experiments::auditRun(
        ledger, ledger.runs().back().runId, {}, [](const experiments::AuditSummary&) {}, noteMismatch);
    if (s.reproduced == s.checked && s.checked > 0) return "";
    return std::to_string(s.reproduced) + "/" + std::to_string(s.checked) + " items reproduced; " + firstMismatch;
}

std::string runCommand(const test::TempDir& dir) {
    return "run " + shellQuote(dir.file("exp.toml")) + " --ledger " + shellQuote(dir.file("ledger.db")) +
           " --keep-caches " + shellQuote(dir.file("caches"));
}

// Everything a resume must reproduce (not the timings), as JSON so that a mismatch prints both sides.
// Kept caches are recorded by path: those are made relative to the run's folder (the ledger's).
nlohmann::json ledgerItems(const std::string& path) {
    const std::string folder = fs::path(path).parent_path().string() + "/";
    const experiments::Ledger ledger(path, experiments::LedgerAccess::ReadOnly);
    const auto runs = ledger.runs();
    EXPECT_EQ(runs.size(), 1u) << path;
    nlohmann::json out = nlohmann::json::array();
    if (runs.size() != 1) return out;
    for (auto r : ledger.items(runs.front().runId)) {
        for (auto& [construction, cachePath] : r.results.caches) {
            EXPECT_EQ(cachePath.rfind(folder, 0), 0u) << cachePath;
            cachePath = cachePath.substr(folder.size());
        }
        out.push_back({{"id", r.itemId},
                       {"status", experiments::itemStatusName(r.status)},
                       {"results", experiments::toJson(r.results)},
                       {"trajectories", r.trajectories.byName()},
                       {"fingerprints", r.fingerprints.byName()},
                       {"tokens", r.tokens}});
    }
    return out;
}

std::string integrityCheck(const std::string& path) {
    sqlite3* db = nullptr;
    std::string verdict = "cannot open";
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* stmt = nullptr;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &stmt, nullptr) == SQLITE_OK &&
            sqlite3_step(stmt) == SQLITE_ROW)
            verdict = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
        sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
    return verdict;
}

std::map<std::string, std::string> folderFiles(const std::string& folder) {
    std::map<std::string, std::string> files;
    if (!fs::is_directory(folder)) return files;
    for (const auto& e : fs::directory_iterator(folder))
        files[e.path().filename().string()] = test::readTextFile(e.path().string());
    return files;
}

// Killed at fault point n of a fresh copy of the small run, then resumed: "" when everything matches
// the uninterrupted run, else what did not.
std::string killAndResume(long long n, const nlohmann::json& expected,
                          const std::map<std::string, std::string>& expectedCaches) {
    test::TempDir dir;
    writeSmallExperiment(dir);
    const auto killed = runCli(runCommand(dir), "KVSCOPE_FAULT_AT=" + std::to_string(n));
    if (killed.exitCode == 0 ||
        killed.err.find("fault injection: killed at fault point " + std::to_string(n)) == std::string::npos)
        return "was not killed (exit " + std::to_string(killed.exitCode) + "): " + killed.err;
    try {
        resumeInProcess(dir);
    } catch (const std::exception& e) {
        return std::string("resume failed: ") + e.what();
    }
    const auto items = ledgerItems(dir.file("ledger.db"));
    if (items != expected) return "ledger differs:\n" + items.dump(1) + "\nexpected:\n" + expected.dump(1);
    if (const auto verdict = integrityCheck(dir.file("ledger.db")); verdict != "ok")
        return "integrity_check: " + verdict;
    try {
        if (const auto audit = auditInProcess(dir.file("ledger.db")); !audit.empty()) return "audit: " + audit;
    } catch (const std::exception& e) {
        return std::string("audit failed: ") + e.what();
    }
    if (folderFiles(dir.file("caches")) != expectedCaches) return "kept caches differ";
    for (const auto& e : fs::recursive_directory_iterator(dir.path()))
        if (e.path().extension() == ".partial") return "left behind: " + e.path().string();
    return "";
}

TEST(CrashSafety, KilledAtEveryWriteThenResumedEqualsTheUninterruptedRun) {
    test::TempDir reference;
    writeSmallExperiment(reference);
    const auto r = runCli(runCommand(reference), "KVSCOPE_FAULT_COUNT=" + shellQuote(reference.file("fault-points")));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const long long faultPoints = std::stoll(test::readTextFile(reference.file("fault-points")));
    const auto expected = ledgerItems(reference.file("ledger.db"));
    ASSERT_EQ(expected.size(), 2u);
    const auto expectedCaches = folderFiles(reference.file("caches"));
    ASSERT_EQ(expectedCaches.size(), 4u);  // live and prefill of each item
    ASSERT_GE(faultPoints, 30) << "the hook saw too few writes to walk";

    // Two walkers (each point costs a short process); failures are collected, not thrown.
    std::atomic<long long> next{1};
    std::mutex mutex;
    std::vector<std::string> failures;
    auto walk = [&] {
        for (long long n = next++; n <= faultPoints; n = next++) {
            const std::string failure = killAndResume(n, expected, expectedCaches);
            if (failure.empty()) continue;
            const std::lock_guard<std::mutex> lock(mutex);
            failures.push_back("killed at fault point " + std::to_string(n) + " of " + std::to_string(faultPoints) +
                               ": " + failure);
        }
    };
    std::thread second(walk);
    walk();
    second.join();
    EXPECT_TRUE(failures.empty()) << failures.size() << " of " << faultPoints
                                  << " fault points failed; first: " << failures.front();
    RecordProperty("fault_points_walked", static_cast<int>(faultPoints));
}

TEST(CrashSafety, AMergeKilledAtAnyWriteLeavesItsOutputAsItWas) {
    test::TempDir dir;
    writeSmallExperiment(dir);
    const std::string exp = shellQuote(dir.file("exp.toml"));
    for (int i = 0; i < 2; ++i)
        ASSERT_EQ(runCli("run " + exp + " --ledger " + shellQuote(dir.file("s" + std::to_string(i) + ".db")) +
                         " --shard " + std::to_string(i) + "/2")
                      .exitCode,
                  0);
    const std::string merge = "ledger merge " + shellQuote(dir.file("out.db")) + " " + shellQuote(dir.file("s1.db"));
    ASSERT_EQ(runCli("ledger merge " + shellQuote(dir.file("out.db")) + " " + shellQuote(dir.file("s0.db"))).exitCode,
              0);
    const auto before = ledgerItems(dir.file("out.db"));
    ASSERT_EQ(before.size(), 1u);  // item a

    fs::copy_file(dir.file("out.db"), dir.file("start.db"));
    ASSERT_EQ(runCli(merge, "KVSCOPE_FAULT_COUNT=" + shellQuote(dir.file("fault-points"))).exitCode, 0);
    const long long faultPoints = std::stoll(test::readTextFile(dir.file("fault-points")));
    const auto merged = ledgerItems(dir.file("out.db"));
    ASSERT_EQ(merged.size(), 2u);
    ASSERT_GE(faultPoints, 5);
    for (long long n = 1; n <= faultPoints; ++n) {
        SCOPED_TRACE("merge killed at fault point " + std::to_string(n) + " of " + std::to_string(faultPoints));
        fs::copy_file(dir.file("start.db"), dir.file("out.db"), fs::copy_options::overwrite_existing);
        ASSERT_NE(runCli(merge, "KVSCOPE_FAULT_AT=" + std::to_string(n)).exitCode, 0);
        const auto after = ledgerItems(dir.file("out.db"));
        // Killed before the rename: OUT as it was; after it: the whole merge. Never anything between.
        EXPECT_TRUE(after == before || after == merged) << after.dump(1);
        EXPECT_EQ(integrityCheck(dir.file("out.db")), "ok");
        ASSERT_NO_THROW(experiments::mergeLedgers(dir.file("out.db"), {dir.file("s1.db")}));  // `merge` again
        EXPECT_EQ(ledgerItems(dir.file("out.db")).dump(1), merged.dump(1));
        EXPECT_FALSE(fs::exists(dir.file("out.db.partial")));
    }
}

}  // namespace
}  // namespace kvscope
