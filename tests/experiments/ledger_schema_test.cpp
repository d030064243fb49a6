// SPDX-License-Identifier: MIT
// The ledger's schema, pinned: tests/data/ledger/v1.sql is the text dump of a real version-1 ledger
// (made by tests/data/ledger/make_v1.sh: every protocol on four items, one of them divergent, and a
// second run whose items never reach their boundary). Whatever the code becomes, it must read that
// file into these values, write the same bytes back, and refuse a damaged row naming where it is.
#include "experiments/ledger.h"
#include "experiments/report.h"

#include "core/cache/fingerprint.h"
#include "core/util/error.h"
#include "support/expect_error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <thread>

namespace kvscope::experiments {
namespace {

const char* const kMainRun = "e9fd25c1e9b864b7";       // schema-v1: every protocol
const char* const kNoBoundaryRun = "231868c510332433";  // schema-v1-no-boundary

// The committed dump loaded into a fresh database file; `edit` (SQL) runs on it afterwards.
std::string loadFixture(const test::TempDir& dir, const std::string& edit = "") {
    const std::string path = dir.file("v1.db");
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string sql = test::readTextFile(test::testDataDir() + "/ledger/v1.sql") + edit;
    char* message = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK) << (message ? message : "");
    sqlite3_free(message);
    sqlite3_close(db);
    return path;
}

// protocol -> the exact stored text, for one item.
std::map<std::string, std::string> storedRows(const std::string& path, const std::string& run,
                                              const std::string& item) {
    sqlite3* db = nullptr;
    sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(db, "SELECT protocol, data FROM results WHERE run_id = ? AND item_id = ?", -1, &s, nullptr);
    sqlite3_bind_text(s, 1, run.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, item.c_str(), -1, SQLITE_TRANSIENT);
    std::map<std::string, std::string> rows;
    while (sqlite3_step(s) == SQLITE_ROW)
        rows[reinterpret_cast<const char*>(sqlite3_column_text(s, 0))] =
            reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rows;
}

TEST(LedgerSchema, VersionOneIsTheVersionThisCodeWrites) {
    // A new version needs a new fixture and a decision about this one (read it, or refuse it by name).
    EXPECT_EQ(Ledger::kSchemaVersion, 1);
}

TEST(LedgerSchema, VersionOneFixtureReadsIntoTheseValues) {
    test::TempDir dir;
    const Ledger ledger(loadFixture(dir), LedgerAccess::ReadOnly);
    const auto runs = ledger.runs();
    ASSERT_EQ(runs.size(), 2u);
    const RunDescription main = describeRun(ledger.run(kMainRun).manifest);
    EXPECT_EQ(main.name, "schema-v1");
    EXPECT_EQ(main.dtypes, std::vector<std::string>{"bf16"});
    EXPECT_EQ(main.kernels, Kernels::Torch);
    EXPECT_EQ(main.device, "cpu");

    const auto items = ledger.items(kMainRun);
    ASSERT_EQ(items.size(), 4u);
    for (const ItemRecord& item : items) {
        EXPECT_EQ(item.status, ItemStatus::Done) << item.itemId;
        const ItemResults& r = item.results;
        ASSERT_TRUE(r.trace && r.matched && r.fixedPrefix2x2 && r.bridge && r.audit) << item.itemId;
        EXPECT_EQ(r.trace->length, 64);
        EXPECT_EQ(r.trace->stopReason, StopReason::MaxNewTokens);
        EXPECT_EQ(r.trace->boundary, 32);
        EXPECT_EQ(r.matched->marginsLive.size(), 32u);
        EXPECT_TRUE(r.matched->replicaLiveExact && r.matched->replicaPrefillExact);
        EXPECT_TRUE(r.bridge->exact);
        EXPECT_TRUE(r.audit->reproduced);
        EXPECT_TRUE(r.audit->mismatches.empty());
        EXPECT_EQ(r.caches.count("live"), 1u);
        EXPECT_FALSE(r.fixedPrefix2x2->byPrecision.at("fp32").disagree);
        EXPECT_EQ(r.divergent(), item.itemId == "arith-03") << item.itemId;
    }
    // The divergent item, field by field.
    const ItemResults& d = items[3].results;
    EXPECT_EQ(d.matched->firstDivergence, 8);
    ASSERT_TRUE(d.matched->liveAtDivergence && d.matched->prefillAtDivergence);
    EXPECT_EQ(d.matched->liveAtDivergence->id, 171);
    EXPECT_EQ(d.matched->prefillAtDivergence->id, 49);
    EXPECT_EQ(d.matched->liveAtDivergence->margin, 0.015625);
    EXPECT_EQ(d.matched->answerLive, "1");
    EXPECT_FALSE(d.matched->correctLive);
    EXPECT_EQ(d.fixedPrefix2x2->byPrecision.at("bf16").firstDivergence, 8);
    ASSERT_TRUE(d.transplant && d.localize);
    EXPECT_EQ(d.transplant->layers, "all");
    EXPECT_TRUE(d.transplant->prefillFromLive.followsDonor && d.transplant->liveFromPrefill.followsDonor);
    EXPECT_TRUE(d.localize->found);
    EXPECT_EQ(d.localize->layers, std::vector<int64_t>{1});
    EXPECT_EQ(d.localize->parts, KvParts::Keys);
    EXPECT_EQ(d.localize->tests, 5);
    EXPECT_EQ(items[0].results.bridge->construction, "incremental:19");
    EXPECT_FALSE(items[0].results.matched->answerLive.has_value());

    const auto none = ledger.items(kNoBoundaryRun);
    ASSERT_EQ(none.size(), 2u);
    for (const ItemRecord& item : none) {
        EXPECT_EQ(item.status, ItemStatus::NoBoundary);
        ASSERT_TRUE(item.results.trace.has_value());
        EXPECT_FALSE(item.results.trace->boundary.has_value());
        EXPECT_EQ(item.results.protocols(), std::vector<std::string>{"trace"});
    }
    const StudySummary study = summarizeStudy(items);
    EXPECT_EQ(study.matched.n, 4);
    EXPECT_EQ(study.matched.suffixDiffer, 1);
    EXPECT_EQ(study.fixedPrefix.at("bf16").disagree, 1);
    EXPECT_EQ(summarizeStudy(none).matched.noBoundary, 2);
}

// Reading and writing again gives the stored bytes, and the comparison fingerprint each item carries
// (sha256 over its results before caches and audit, and its trajectories) still matches: an audit
// of an old run compares like with like.
TEST(LedgerSchema, VersionOneRoundTripsByteForByte) {
    test::TempDir dir;
    const std::string path = loadFixture(dir);
    const Ledger ledger(path, LedgerAccess::ReadOnly);
    for (const char* run : {kMainRun, kNoBoundaryRun})
        for (const ItemRecord& item : ledger.items(run)) {
            const nlohmann::json written = toJson(item.results);
            const auto stored = storedRows(path, run, item.itemId);
            ASSERT_EQ(written.size(), stored.size()) << item.itemId;
            for (const auto& [protocol, text] : stored) EXPECT_EQ(written.at(protocol).dump(), text) << protocol;
            if (item.status != ItemStatus::Done) continue;
            ItemResults compared = item.results;
            compared.caches.clear();
            compared.audit.reset();
            const std::string comparison = toJson(compared).dump() + nlohmann::json(item.trajectories.byName()).dump();
            EXPECT_EQ(sha256Hex(comparison.data(), comparison.size()), item.fingerprints.comparison.value())
                << item.itemId;
        }
}

TEST(LedgerSchema, WritersOpeningANewFileAtOnceAllGetTheSameLedger) {
    // A run and a second writer (a resumed run, `ledger merge`, a test watching the file) may open a
    // path that does not exist yet at the same moment: each must see one schema_version, not race to
    // insert it (CI once saw "UNIQUE constraint failed: meta.key" kill a run this way).
    constexpr int kRounds = 20, kWriters = 4;
    test::TempDir dir;
    for (int round = 0; round < kRounds; ++round) {
        const std::string path = dir.file("new-" + std::to_string(round) + ".db");
        std::atomic<bool> go{false};
        std::vector<std::string> errors(kWriters);
        std::vector<std::thread> writers;
        for (int w = 0; w < kWriters; ++w)
            writers.emplace_back([&, w] {
                while (!go.load()) std::this_thread::yield();
                try {
                    Ledger ledger(path);
                } catch (const std::exception& e) {
                    errors[w] = e.what();
                }
            });
        go = true;
        for (auto& t : writers) t.join();
        for (int w = 0; w < kWriters; ++w) EXPECT_EQ(errors[w], "") << "round " << round << ", writer " << w;
        EXPECT_NO_THROW(Ledger(path, LedgerAccess::ReadOnly)) << "round " << round;
    }
}

TEST(LedgerSchema, ADamagedRowIsRefusedNamingTheLedgerItemProtocolAndField) {
    struct Case {
        const char* edit;
        const char* says;
    };
    const Case cases[] = {
        {"UPDATE results SET data = replace(data, '\"suffix_equal\":true', '\"suffix_equal\":1') "
         "WHERE item_id = 'arith-00' AND protocol = 'matched';",
         "item 'arith-00': matched: field 'suffix_equal' must be a boolean"},
        {"UPDATE results SET data = '{\"exact\":true' WHERE item_id = 'arith-01' AND protocol = 'bridge';",
         "item 'arith-01': stored bridge result is not valid JSON"},
        {"UPDATE results SET protocol = 'telepathy' WHERE item_id = 'arith-02' AND protocol = 'bridge';",
         "item 'arith-02': unknown protocol 'telepathy'"},
        {"UPDATE items SET status = 'half-done' WHERE item_id = 'arith-00';",
         "item 'arith-00': status 'half-done' is not one of done, no_boundary"},
        {"UPDATE results SET data = replace(data, '\"stop_reason\":\"max_new_tokens\"', '\"stop_reason\":\"tired\"') "
         "WHERE item_id = 'arith-03' AND protocol = 'trace';",
         "item 'arith-03': trace: field 'stop_reason' has unknown value 'tired'"},
        {"UPDATE results SET data = replace(data, '\"layers\":[1]', '\"layers\":[\"one\"]') "
         "WHERE item_id = 'arith-03' AND protocol = 'localize';",
         "item 'arith-03': localize: field 'layers' must be an array of integers"},
        {"UPDATE results SET data = replace(data, ',\"tests\":5', '') WHERE item_id = 'arith-03' AND protocol = "
         "'localize';",
         "item 'arith-03': localize: field 'tests' is missing"},
        {"UPDATE results SET data = replace(data, '\"kv\":\"k\"', '\"kv\":\"q\"') WHERE item_id = 'arith-03' AND "
         "protocol = 'localize';",
         "item 'arith-03': localize: field 'kv' must be k, v or kv (got 'q')"},
        {"UPDATE results SET data = replace(data, '\"id\":171', '\"id\":\"171\"') "
         "WHERE item_id = 'arith-03' AND protocol = 'matched';",
         "item 'arith-03': matched.at_divergence.live: field 'id' must be an integer"},
        {"UPDATE results SET item_id = 'arith-99' WHERE item_id = 'arith-02' AND protocol = 'bridge';",
         "item 'arith-99': the ledger's results table has a row for this item, which its items table lacks"},
        {"UPDATE trajectories SET name = 'suffix_middle' WHERE item_id = 'arith-02' AND name = 'suffix_live';",
         "item 'arith-02': unknown trajectory 'suffix_middle'"},
        {"UPDATE fingerprints SET name = 'half_cache' WHERE item_id = 'arith-02' AND name = 'live_cache';",
         "item 'arith-02': unknown fingerprint 'half_cache'"},
        {"UPDATE trajectories SET item_id = 'arith-98' WHERE item_id = 'arith-02' AND name = 'prompt';",
         "item 'arith-98': the ledger's trajectories table has a row for this item"},
    };
    for (const Case& c : cases) {
        test::TempDir dir;
        const std::string path = loadFixture(dir, c.edit);
        const Ledger ledger(path, LedgerAccess::ReadOnly);
        test::expectErrorContaining<FormatError>([&] { ledger.items(kMainRun); },
                                                 {path + ": run " + kMainRun + ", " + c.says});
    }
}

// `report`, `audit`, `ledger merge` and the GUI read a run's manifest through Ledger::runs.
TEST(LedgerSchema, ADamagedManifestIsRefusedNamingTheLedgerAndRun) {
    test::TempDir dir;
    const std::string path =
        loadFixture(dir, "UPDATE runs SET manifest = '{broken' WHERE run_id = '" + std::string(kMainRun) + "';");
    const Ledger ledger(path, LedgerAccess::ReadOnly);
    test::expectErrorContaining<FormatError>([&] { ledger.runs(); },
                                             {path + ": run " + kMainRun + "'s manifest is not valid JSON"});
}

}  // namespace
}  // namespace kvscope::experiments
