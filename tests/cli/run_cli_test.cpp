// SPDX-License-Identifier: MIT
// `kvscope run / report / audit / ledger merge` end to end, including kill -9 and resume.
#include "experiments/ledger.h"

#include "core/util/version.h"
#include "support/smollm2_study.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace kvscope {
namespace {

using test::runCli;
using test::shellQuote;

// An experiment over the arithmetic dataset with a generated 4-layer model (the smoke settings),
// written into `dir`. Items 03 and 07 split in bf16 on this model, so transplant and localize run.
std::string writeExperiment(const test::TempDir& dir, const std::string& protocols, const std::string& extra = "") {
    std::filesystem::copy_file(test::testDataDir() + "/../../experiments/data/arith12.jsonl", dir.file("arith12.jsonl"),
                               std::filesystem::copy_options::overwrite_existing);
    const std::string path = dir.file("exp.toml");
    test::writeTextFile(path,
                        "name = \"cli-test\"\n"
                        "[model]\ndir = \"model\"\ndtypes = [\"bf16\"]\n"
                        "[model.generate]\narch = \"qwen2\"\nseed = 3\nhidden_size = 128\nlayers = 4\nheads = 4\n"
                        "kv_heads = 2\nintermediate_size = 256\n"
                        "[dataset]\npath = \"arith12.jsonl\"\n"
                        "[generation]\nmax_new_tokens = 64\nignore_eos = true\n"
                        "[boundary]\nrule = \"fraction\"\nfraction = 0.5\n"
                        "[protocols]\nrun = [" +
                            protocols + "]\n" + extra);
    return shellQuote(path);
}

// `kvscope run EXPERIMENT --ledger DB --limit N` in a child process, for tests that interfere with it.
pid_t startRun(const std::string& experiment, const std::string& db, const char* limit) {
    const pid_t child = ::fork();
    if (child == 0) {
        ::execl(KVSCOPE_CLI, KVSCOPE_CLI, "run", experiment.c_str(), "--ledger", db.c_str(), "--limit", limit,
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    return child;
}

// Items the ledger's first run has recorded; 0 while a starting run has not created it yet.
std::size_t finishedItemCount(const std::string& db) {
    try {
        const experiments::Ledger l(db, experiments::LedgerAccess::ReadOnly);
        const auto runs = l.runs();
        return runs.empty() ? 0 : l.finishedItems(runs.front().runId).size();
    } catch (const std::exception&) {
        return 0;
    }
}

// Interrupt tests signal once an item is recorded (a fixed sleep raced the start-up on a loaded
// machine: the signal came before the handler was installed and ended the process the default way).
void waitForAFinishedItem(const std::string& db) {
    for (int i = 0; i < 1200 && finishedItemCount(db) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

nlohmann::json reportJson(const std::string& ledger) {
    auto r = runCli("report " + shellQuote(ledger) + " --format json");
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return nlohmann::json::parse(r.out);
}

const char* kAll = "\"matched\", \"fixed_prefix_2x2\", \"bridge\", \"audit\", \"transplant\", \"localize\"";

TEST(RunCli, EveryProtocolEndToEndAndTheReportKeys) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    auto r = runCli("run " + writeExperiment(dir, kAll) + " --ledger " + shellQuote(db) +
                    " --items arith-00,arith-03,arith-05,arith-07 --keep-caches " + shellQuote(dir.file("caches")) +
                    " --timing " + shellQuote(dir.file("timing.json")));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.err.find("4 items run"), std::string::npos) << r.err;
    for (const char* step : {"time by step: ", "trace ", "replay ", "fixed_prefix_2x2 ", "bridge "})
        EXPECT_NE(r.err.find(step), std::string::npos) << step << "\n" << r.err;
    // --timing: the same figures per item, as data.
    const auto timing = nlohmann::json::parse(test::readTextFile(dir.file("timing.json")));
    EXPECT_EQ(timing["items_run"], 4);
    EXPECT_EQ(timing["kernels"], "torch");
    EXPECT_EQ(timing["threads"], timing["environment"]["threads"]) << "torch kernels: the manifest records them";
    EXPECT_TRUE(timing["environment"].contains("libtorch")) << timing["environment"];
    ASSERT_EQ(timing["items"].size(), 4u);
    double itemSeconds = 0;
    for (const auto& item : timing["items"]) {
        itemSeconds += item["seconds"].get<double>();
        double steps = 0;
        for (const auto& [step, seconds] : item["seconds_by_step"].items()) steps += seconds.get<double>();
        EXPECT_GT(item["seconds_by_step"].value("trace", 0.0), 0) << item;
        EXPECT_LE(steps, item["seconds"].get<double>()) << item;
        EXPECT_GT(item["tokens"].get<int>(), 0) << item;
    }
    EXPECT_LE(itemSeconds, timing["seconds"].get<double>());

    // The run's live cache (cut from its trace) carries the provenance every cache command checks:
    // spliced with the prefill cache and continued, as transplant and localize do where items split.
    const std::string live = shellQuote(dir.file("caches/arith-00.live.safetensors"));
    const std::string prefill = shellQuote(dir.file("caches/arith-00.prefill.safetensors"));
    const std::string spliced = shellQuote(dir.file("spliced.safetensors"));
    auto splice =
        runCli("cache transplant --recipient " + prefill + " --donor " + live + " --layers all --out " + spliced);
    ASSERT_EQ(splice.exitCode, 0) << splice.err;
    for (const std::string& cache : {live, spliced}) {
        auto continued = runCli("continue --model " + shellQuote(dir.file("model")) + " --cache " + cache +
                                " --max-new-tokens 4 --threads 1");
        EXPECT_EQ(continued.exitCode, 0) << cache << ": " << continued.err;
    }
    const auto j = reportJson(db);
    EXPECT_EQ(j["matched"]["n"], 4);
    EXPECT_EQ(j["cpu_model"], cpuModelName()) << "the machine that created the run, from its manifest";
    EXPECT_EQ(j["cpu_model"], timing["cpu_model"]);
    for (const char* key : {"suffix_differ", "label_differ", "accuracy_live", "accuracy_prefill", "accuracy_diff",
                            "accuracy_diff_ci", "mcnemar_p", "replicas_exact"})
        EXPECT_TRUE(j["matched"].contains(key)) << key;
    EXPECT_EQ(j["matched"]["replicas_exact"]["live"], 4);
    EXPECT_EQ(j["matched"]["replicas_exact"]["prefill"], 4);
    EXPECT_EQ(j["bridge"]["n"], 4);
    EXPECT_EQ(j["bridge"]["exact"], 4);
    EXPECT_EQ(j["audit"]["reproduced"], 4);
    EXPECT_EQ(j["fixed_prefix_2x2"]["fp32"]["n"], 4);
    EXPECT_EQ(j["fixed_prefix_2x2"]["fp32"]["disagree"], 0);
    EXPECT_TRUE(j["fixed_prefix_2x2"]["fp32"].contains("wilson_upper"));
    EXPECT_EQ(j["transplant"]["n"].get<int>(), 2 * j["matched"]["suffix_differ"].get<int>());
    EXPECT_EQ(j["transplant"]["follows_donor"], j["transplant"]["n"]);
    EXPECT_EQ(j["localize"]["n"], j["matched"]["suffix_differ"]);

    // Files written by --out, and a clean audit across processes.
    ASSERT_EQ(runCli("report " + shellQuote(db) + " --out " + shellQuote(dir.file("out"))).exitCode, 0);
    for (const char* f : {"report.md", "report.json", "items.csv"})
        EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("out/") + f))) << f;
    auto audit = runCli("audit " + shellQuote(db));
    EXPECT_EQ(audit.exitCode, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("4/4 items reproduced"), std::string::npos) << audit.out;

    // Transplant and localize have something to do only where bf16 torch kernels split a suffix.
    if (j["matched"]["suffix_differ"] == 0)
        GTEST_SKIP() << test::noSplitHere("no suffix of the 4 items differs in bf16 (transplant, localize)");
    EXPECT_FALSE(j["localize"]["layers_needed"].empty());
}

// The SmolLM2 study (experiments/smollm2.toml, every protocol, audit included) on 4 of its items, with
// 32 new tokens instead of 320; the model from tests/data (the test command fetches it) rather than
// the user's cache.
TEST(RunCli, TheSmolLM2StudyRunsEveryProtocolOnASliceOfItsItems) {
    const std::string gguf = test::smollm2Gguf();
    if (gguf.empty()) GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch-test-data.sh --smollm2 PYTHON)";
    test::TempDir dir;
    test::writeSmolLM2Experiment(dir.file("smollm2.toml"), {{"catalog = \"smollm2\"", "dir = \"" + gguf + "\""},
                                                            {"max_new_tokens = 320", "max_new_tokens = 32"}});
    const std::string db = dir.file("s.db");
    auto r = runCli("run " + shellQuote(dir.file("smollm2.toml")) + " --ledger " + shellQuote(db) +
                    " --items wp-000,wp-001,wp-002,wp-003");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.err.find("4 items run"), std::string::npos) << r.err;
    const auto j = reportJson(db);
    EXPECT_EQ(j["matched"]["n"], 4);
    EXPECT_EQ(j["matched"]["replicas_exact"]["live"], 4);
    EXPECT_EQ(j["matched"]["replicas_exact"]["prefill"], 4);
    EXPECT_EQ(j["bridge"]["exact"], 4);
    EXPECT_EQ(j["audit"]["reproduced"], 4);
    for (const char* dtype : {"bf16", "fp32"}) EXPECT_EQ(j["fixed_prefix_2x2"][dtype]["n"], 4) << dtype;
    EXPECT_EQ(j["transplant"]["n"].get<int>(), 2 * j["matched"]["suffix_differ"].get<int>());
    EXPECT_EQ(j["localize"]["n"], j["matched"]["suffix_differ"]);
    // The audit protocol above replayed each item in full (auditItem, what `kvscope audit` calls);
    // the command itself is tested on the small models (RunCli.AuditDetectsATamperedRow).
}

// The study's remedy on the real model (experiments/smollm2-invariant.toml): with batch-invariant
// kernels the one-shot prefill is the live cache bit for bit, so no continuation splits, in bf16 or
// fp32, on any CPU; 2 items, 32 new tokens.
TEST(RunCli, TheSmolLM2StudyWithInvariantKernelsSplitsNoItem) {
    const std::string gguf = test::smollm2Gguf();
    if (gguf.empty()) GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch-test-data.sh --smollm2 PYTHON)";
    test::TempDir dir;
    test::writeSmolLM2Experiment(
        dir.file("inv.toml"),
        {{"catalog = \"smollm2\"", "dir = \"" + gguf + "\""}, {"max_new_tokens = 320", "max_new_tokens = 32"}},
        "smollm2-invariant.toml");
    const std::string db = dir.file("i.db");
    auto r =
        runCli("run " + shellQuote(dir.file("inv.toml")) + " --ledger " + shellQuote(db) + " --items wp-000,wp-001");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto j = reportJson(db);
    EXPECT_EQ(j["kernels"], "invariant");
    EXPECT_EQ(j["matched"]["n"], 2);
    EXPECT_EQ(j["matched"]["suffix_differ"], 0);
    EXPECT_EQ(j["matched"]["first_divergence"]["n"], 0);
    EXPECT_EQ(j["bridge"]["exact"], 2);
    EXPECT_EQ(j["audit"]["reproduced"], 2);
    for (const char* dtype : {"bf16", "fp32"}) EXPECT_EQ(j["fixed_prefix_2x2"][dtype]["disagree"], 0) << dtype;
    EXPECT_EQ(j["transplant"]["n"], 0) << "nothing diverged, so nothing to transplant";
}

// The same experiment with `kernels = "invariant"` (or `kernels`) in [model].
std::string writeInvariantExperiment(const test::TempDir& dir, const std::string& protocols,
                                     const std::string& kernels = "invariant") {
    const std::string quoted = writeExperiment(dir, protocols);
    const std::string path = dir.file("exp.toml");
    std::string text = test::readTextFile(path);
    text.replace(text.find("dtypes = [\"bf16\"]\n"), 17, "dtypes = [\"bf16\"]\nkernels = \"" + kernels + "\"\n");
    text.replace(text.find("name = \"cli-test\""), 17, "name = \"cli-test-" + kernels + "\"");
    test::writeTextFile(path, text);
    return quoted;
}

TEST(RunCli, TheTileOrderRemovesTheDivergenceToo) {
    // kernels = "invariant-tiles": the same remedy in the tile order (AMX's, or its reference).
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    auto r = runCli("run " + writeInvariantExperiment(dir, kAll, "invariant-tiles") + " --ledger " + shellQuote(db) +
                    " --items arith-00,arith-03,arith-05,arith-07");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto j = reportJson(db);
    EXPECT_EQ(j["kernels"], "invariant-tiles");
    EXPECT_EQ(j["matched"]["n"], 4);
    EXPECT_EQ(j["matched"]["suffix_differ"], 0);
    EXPECT_EQ(j["bridge"]["exact"], 4);
    EXPECT_EQ(j["fixed_prefix_2x2"]["bf16"]["disagree"], 0);
    EXPECT_EQ(j["audit"]["reproduced"], 4);
    auto audit = runCli("audit " + shellQuote(db));
    EXPECT_EQ(audit.exitCode, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("checked by one forward"), std::string::npos) << audit.out;
}

TEST(RunCli, InvariantKernelsRemoveTheDivergenceAndAuditAtPrefillSpeed) {
    // Items 03 and 07 split in bf16 with torch kernels (the test above); with invariant kernels the
    // live cache and the one-shot prefill are the same bits, so nothing splits, the bridge is one
    // prefill, and the audit checks each trajectory by one forward.
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    const std::string items = " --items arith-00,arith-03,arith-05,arith-07";
    ASSERT_EQ(runCli("run " + writeExperiment(dir, kAll) + " --ledger " + shellQuote(db) + items).exitCode, 0);
    auto r = runCli("run " + writeInvariantExperiment(dir, kAll) + " --ledger " + shellQuote(db) + items);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto j = reportJson(db);  // the newest run: invariant
    EXPECT_EQ(j["kernels"], "invariant");
    EXPECT_EQ(j["matched"]["n"], 4);
    EXPECT_EQ(j["matched"]["suffix_differ"], 0);
    EXPECT_EQ(j["matched"]["label_differ"], 0);
    EXPECT_EQ(j["bridge"]["exact"], 4);
    EXPECT_EQ(j["fixed_prefix_2x2"]["bf16"]["disagree"], 0);
    EXPECT_EQ(j["fixed_prefix_2x2"]["fp32"]["disagree"], 0);
    EXPECT_EQ(j["audit"]["reproduced"], 4);
    EXPECT_EQ(j["transplant"]["n"], 0);  // nothing diverged, nothing to transplant
    {
        const experiments::Ledger ledger(db, experiments::LedgerAccess::ReadOnly);
        const auto run = ledger.runs().back();
        for (const auto& item : ledger.items(run.runId))
            EXPECT_EQ(item.results.bridge.value().construction, "prefill") << item.itemId;
    }

    // Side by side: torch kernels split some suffixes, invariant kernels none.
    auto compared = runCli("report " + shellQuote(db) + " --compare --format json");
    ASSERT_EQ(compared.exitCode, 0) << compared.err;
    const auto c = nlohmann::json::parse(compared.out);
    ASSERT_EQ(c["runs"].size(), 2u);
    EXPECT_EQ(c["runs"][0]["kernels"], "torch");
    // Whether torch kernels split any of the 4 suffixes depends on the CPU and libtorch; said, not pinned.
    if (c["runs"][0]["matched"]["suffix_differ"] == 0)
        std::cout << "note: " << test::noSplitHere("torch kernels split no suffix of the 4 items") << "\n";
    EXPECT_EQ(c["runs"][1]["kernels"], "invariant");
    EXPECT_EQ(c["runs"][1]["matched"]["suffix_differ"], 0);
    auto md = runCli("report " + shellQuote(db) + " --compare");
    EXPECT_NE(md.out.find("cli-test (torch kernels)"), std::string::npos) << md.out;
    EXPECT_NE(md.out.find("cli-test-invariant (invariant kernels)"), std::string::npos) << md.out;

    auto audit = runCli("audit " + shellQuote(db));  // the newest run
    EXPECT_EQ(audit.exitCode, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("checked by one forward"), std::string::npos) << audit.out;
    EXPECT_NE(audit.out.find("4/4 items reproduced"), std::string::npos) << audit.out;
    auto full = runCli("audit " + shellQuote(db) + " --full");
    EXPECT_EQ(full.exitCode, 0) << full.out << full.err;
    EXPECT_NE(full.out.find("token by token"), std::string::npos) << full.out;

    // A tampered id is found by the one-forward check too, at the same token.
    {
        experiments::Ledger ledger(db);
        const std::string run = ledger.runs().back().runId;
        auto ids = ledger.items(run).at(1).trajectories.suffixLive.value();
        ids.at(5) += 1;
        ledger.overwriteTrajectory(run, ledger.items(run).at(1).itemId, "suffix_live", ids);
    }
    auto tampered = runCli("audit " + shellQuote(db));
    EXPECT_EQ(tampered.exitCode, 3) << tampered.out;
    EXPECT_NE(tampered.out.find("trajectory 'suffix_live' differs at token 5"), std::string::npos) << tampered.out;
    EXPECT_NE(tampered.out.find("3/4 items reproduced"), std::string::npos) << tampered.out;
}

TEST(RunCli, AuditDetectsATamperedRow) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    ASSERT_EQ(
        runCli("run " + writeExperiment(dir, "\"matched\"") + " --ledger " + shellQuote(db) + " --limit 2").exitCode,
        0);
    {
        experiments::Ledger ledger(db);
        const std::string run = ledger.runs().front().runId;
        auto ids = ledger.items(run).at(1).trajectories.suffixLive.value();
        ids.at(5) += 1;
        ledger.overwriteTrajectory(run, "arith-01", "suffix_live", ids);
    }
    auto audit = runCli("audit " + shellQuote(db));
    EXPECT_EQ(audit.exitCode, 3);
    EXPECT_NE(audit.out.find("item arith-01: trajectory 'suffix_live' differs at token 5"), std::string::npos)
        << audit.out;
    EXPECT_NE(audit.out.find("1/2 items reproduced"), std::string::npos) << audit.out;
    // `compare` rebuilds the item and checks it against the ledger first, as the GUI does.
    const auto compared = runCli("compare " + shellQuote(db) + " --item arith-01");
    EXPECT_EQ(compared.exitCode, 2) << compared.err;
    EXPECT_NE(compared.err.find("rebuilding item arith-01 does not reproduce the ledger's continuations"),
              std::string::npos)
        << compared.err;
}

TEST(RunCli, ChangedInputsAreRefusedUnlessANewRunIsAsked) {
    test::TempDir dir;
    const std::string db = shellQuote(dir.file("r.db"));
    const std::string exp = writeExperiment(dir, "\"bridge\"");
    ASSERT_EQ(runCli("run " + exp + " --ledger " + db + " --limit 1").exitCode, 0);
    auto again = runCli("run " + exp + " --ledger " + db + " --limit 2");  // same inputs: resumes
    ASSERT_EQ(again.exitCode, 0) << again.err;
    EXPECT_NE(again.err.find("resumed: 1 items run, 1 already done"), std::string::npos) << again.err;
    test::writeTextFile(dir.file("arith12.jsonl"),
                        test::readTextFile(dir.file("arith12.jsonl")) +
                            "{\"id\": \"extra\", \"prompt\": \"Q: 1 + 1?\", \"answer\": \"2\"}\n");
    auto refused = runCli("run " + exp + " --ledger " + db + " --limit 1");
    EXPECT_EQ(refused.exitCode, 2);
    EXPECT_NE(refused.err.find("file dataset/arith12.jsonl changed"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("--new-run"), std::string::npos);
    ASSERT_EQ(runCli("run " + exp + " --ledger " + db + " --limit 1 --new-run").exitCode, 0);
    EXPECT_EQ(experiments::Ledger(dir.file("r.db")).runs().size(), 2u);
}

TEST(RunCli, KilledMidRunThenResumedLosesAndRepeatsNothing) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    const std::string exp = writeExperiment(dir, "\"matched\", \"bridge\"");
    // All 12 items, so that the watcher (polling every 10 ms) sees two committed with ten to go: a run
    // of 6 could finish between two polls of a slower watcher on a fast machine.
    ASSERT_EQ(runCli("run " + exp + " --ledger " + shellQuote(dir.file("reference.db")) + " --limit 12").exitCode, 0);

    const pid_t child = startRun(dir.file("exp.toml"), db, "12");
    ASSERT_GE(child, 0);
    // Kill it (SIGKILL: no chance to clean up) once two items are committed. The watcher stops the
    // run before each look and lets it go on only while fewer are committed, so the run is never
    // killed later than the look that saw two, however slowly the watcher is scheduled.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::size_t done = 0;
    bool ended = false;  // reaped by the watcher's waitpid: nothing left to kill
    while (std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        int stopped = 0;
        ::kill(child, SIGSTOP);
        ::waitpid(child, &stopped, WUNTRACED);
        done = finishedItemCount(db);  // read only: opening to write would take part in creating the file
        ended = !WIFSTOPPED(stopped);
        if (done >= 2 || ended) break;
        ::kill(child, SIGCONT);
    }
    if (!ended) {
        ::kill(child, SIGKILL);
        int status = 0;
        ::waitpid(child, &status, 0);
    }
    ASSERT_FALSE(ended) << "the run ended before it could be killed";
    ASSERT_GE(done, 2u);
    ASSERT_LT(done, 12u) << "the run finished before it could be killed";

    auto resumed = runCli("run " + exp + " --ledger " + shellQuote(db) + " --limit 12");
    ASSERT_EQ(resumed.exitCode, 0) << resumed.err;
    experiments::Ledger killed(db), reference(dir.file("reference.db"));
    const auto a = killed.items(killed.runs().front().runId), b = reference.items(reference.runs().front().runId);
    ASSERT_EQ(a.size(), 12u);
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].itemId, b[i].itemId);
        EXPECT_EQ(a[i].fingerprints, b[i].fingerprints) << a[i].itemId;
        EXPECT_EQ(a[i].trajectories, b[i].trajectories) << a[i].itemId;
    }
}

TEST(RunCli, ASecondWriterIsRefusedNamingTheHolderAndNothingIsComputedTwice) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    const std::string exp = writeExperiment(dir, "\"matched\"");
    const pid_t first = startRun(dir.file("exp.toml"), db, "4");
    ASSERT_GE(first, 0);
    // Wait until the first run holds the lock (its PID is in the lock file).
    const std::string expected = std::to_string(first);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline &&
           (!std::filesystem::exists(db + ".lock") || test::readTextFile(db + ".lock").rfind(expected, 0) != 0))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Stopped, it holds the lock while the second starts: on a fast machine its 4 items were done
    // before the second process had loaded libtorch, and the second found nothing to refuse.
    ::kill(first, SIGSTOP);
    const auto second = runCli("run " + exp + " --ledger " + shellQuote(db) + " --limit 4");
    ::kill(first, SIGCONT);
    int status = 0;
    ::waitpid(first, &status, 0);
    EXPECT_EQ(second.exitCode, 2) << second.err;
    EXPECT_NE(second.err.find("another kvscope run (pid " + expected + ")"), std::string::npos) << second.err;
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the first run finishes undisturbed";
    experiments::Ledger ledger(db, experiments::LedgerAccess::ReadOnly);
    EXPECT_EQ(ledger.items(ledger.runs().front().runId).size(), 4u);
    // Once the holder has exited, the ledger is free again (the kernel dropped the lock).
    EXPECT_EQ(runCli("run " + exp + " --ledger " + shellQuote(db) + " --limit 4").exitCode, 0);
}

TEST(RunCli, InterruptFinishesTheItemAndTellsHowToResume) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    const std::string exp = writeExperiment(dir, "\"matched\"");
    const std::string errFile = dir.file("err.txt");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::execl(KVSCOPE_CLI, KVSCOPE_CLI, "run", dir.file("exp.toml").c_str(), "--ledger", db.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    waitForAFinishedItem(db);
    ::kill(child, SIGINT);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130);
    experiments::Ledger l(db);
    const auto done = l.finishedItems(l.runs().front().runId).size();
    EXPECT_GE(done, 1u);
    EXPECT_LT(done, 12u);
    auto rest = runCli("run " + exp + " --ledger " + shellQuote(db));
    ASSERT_EQ(rest.exitCode, 0) << rest.err;
    EXPECT_EQ(experiments::Ledger(db).finishedItems(l.runs().front().runId).size(), 12u);
}

// A second interrupt does not wait for the item in flight: the process ends at once, that item is
// not recorded, and the resumed run computes it and the rest, each once.
TEST(RunCli, ASecondInterruptStopsAtOnceAndTheResumeRedoesTheItem) {
    test::TempDir dir;
    const std::string db = dir.file("r.db");
    const std::string exp = writeExperiment(dir, kAll);
    int errPipe[2];
    ASSERT_EQ(::pipe(errPipe), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::dup2(errPipe[1], STDERR_FILENO);
        ::execl(KVSCOPE_CLI, KVSCOPE_CLI, "run", dir.file("exp.toml").c_str(), "--ledger", db.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(errPipe[1]);
    waitForAFinishedItem(db);
    // The second signal only once the first has been handled (two pending signals would merge into
    // one); every protocol makes the item in flight long enough that it is still running then.
    std::string err;
    char buffer[4096];
    ::kill(child, SIGINT);
    while (err.find("interrupt again") == std::string::npos) {
        const ssize_t n = ::read(errPipe[0], buffer, sizeof buffer);
        ASSERT_GT(n, 0) << err;
        err.append(buffer, static_cast<std::size_t>(n));
    }
    ::kill(child, SIGINT);
    int status = 0;
    ::waitpid(child, &status, 0);
    for (ssize_t n; (n = ::read(errPipe[0], buffer, sizeof buffer)) > 0;)
        err.append(buffer, static_cast<std::size_t>(n));
    ::close(errPipe[0]);
    ASSERT_TRUE(WIFEXITED(status)) << err;
    EXPECT_EQ(WEXITSTATUS(status), 130) << err;
    EXPECT_NE(err.find("stopped at once"), std::string::npos) << err;
    EXPECT_EQ(err.find("items run"), std::string::npos) << "no summary: it did not wait for the item\n" << err;
    const std::size_t done = finishedItemCount(db);
    EXPECT_GE(done, 1u);
    EXPECT_LT(done, 12u);
    auto rest = runCli("run " + exp + " --ledger " + shellQuote(db));
    ASSERT_EQ(rest.exitCode, 0) << rest.err;
    EXPECT_NE(rest.err.find(std::to_string(12 - done) + " items run"), std::string::npos) << rest.err;
    EXPECT_EQ(finishedItemCount(db), 12u);
}

TEST(RunCli, ReportAndAuditLeaveAFileThatIsNotALedgerAsItWas) {
    test::TempDir dir;
    test::writeTextFile(dir.file("empty.db"), "");
    for (const char* command : {"report", "audit"}) {
        const auto r = test::runCli(std::string(command) + " " + test::shellQuote(dir.file("empty.db")));
        EXPECT_EQ(r.exitCode, 1) << command << ": " << r.err;
        EXPECT_NE(r.err.find("empty.db: not a kvscope ledger"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(std::filesystem::file_size(dir.file("empty.db")), 0u)
            << command << " turned an empty file into a ledger";
    }
}

TEST(RunCli, ShardsMergeIntoOneRun) {
    test::TempDir dir;
    const std::string exp = writeExperiment(dir, "\"bridge\"");
    for (int i = 0; i < 2; ++i)
        ASSERT_EQ(runCli("run " + exp + " --ledger " + shellQuote(dir.file("s" + std::to_string(i) + ".db")) +
                         " --shard " + std::to_string(i) + "/2 --limit 2")
                      .exitCode,
                  0);
    auto merge = runCli("ledger merge " + shellQuote(dir.file("all.db")) + " " + shellQuote(dir.file("s0.db")) + " " +
                        shellQuote(dir.file("s1.db")));
    ASSERT_EQ(merge.exitCode, 0) << merge.err;
    experiments::Ledger all(dir.file("all.db"));
    ASSERT_EQ(all.runs().size(), 1u);
    EXPECT_EQ(all.finishedItems(all.runs().front().runId),
              (std::set<std::string>{"arith-00", "arith-01", "arith-02", "arith-03"}));
    EXPECT_EQ(reportJson(dir.file("all.db"))["bridge"]["n"], 4);

    // A damaged input is named, and a merge into a new OUT that fails leaves nothing behind.
    std::filesystem::copy_file(dir.file("s1.db"), dir.file("bad.db"));
    sqlite3* bad = nullptr;
    ASSERT_EQ(sqlite3_open(dir.file("bad.db").c_str(), &bad), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(bad, "UPDATE runs SET manifest = '{broken'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(bad);
    auto refused = runCli("ledger merge " + shellQuote(dir.file("new.db")) + " " + shellQuote(dir.file("s0.db")) + " " +
                          shellQuote(dir.file("bad.db")));
    EXPECT_NE(refused.exitCode, 0);
    EXPECT_NE(refused.err.find(dir.file("bad.db") + ": run "), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("manifest is not valid JSON"), std::string::npos) << refused.err;
    for (const char* left : {"new.db", "new.db.partial", "new.db.lock"})
        EXPECT_FALSE(std::filesystem::exists(dir.file(left))) << left;
    auto report = runCli("report " + shellQuote(dir.file("bad.db")));
    EXPECT_EQ(report.exitCode, 1);
    EXPECT_NE(report.err.find("manifest is not valid JSON"), std::string::npos) << report.err;
    EXPECT_EQ(report.err.rfind("kvscope: error: " + dir.file("bad.db") + ": run ", 0), 0u) << report.err;
}

TEST(RunCli, ShardsStartedTogetherGenerateTheModelOnceAndCleanAfterADeadGenerator) {
    test::TempDir dir;
    writeExperiment(dir, "\"bridge\"");
    const std::string experiment = dir.file("exp.toml");
    // What a generator killed midway leaves: its staging folder, named by a PID no process has.
    std::filesystem::create_directories(dir.file("model.2147483000.partial"));
    test::writeTextFile(dir.file("model.2147483000.partial/tokenizer.json"), "{");
    std::vector<pid_t> shards;
    for (int i = 0; i < 2; ++i) {
        const pid_t child = ::fork();
        if (child == 0) {
            const std::string ledger = dir.file("s" + std::to_string(i) + ".db"), shard = std::to_string(i) + "/2";
            ::execl(KVSCOPE_CLI, KVSCOPE_CLI, "run", experiment.c_str(), "--ledger", ledger.c_str(), "--shard",
                    shard.c_str(), "--limit", "1", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        shards.push_back(child);
    }
    for (const pid_t child : shards) {
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    EXPECT_TRUE(std::filesystem::exists(dir.file("model/config.json")));
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
        EXPECT_NE(entry.path().extension(), ".partial") << entry.path();
    auto merge = runCli("ledger merge " + shellQuote(dir.file("all.db")) + " " + shellQuote(dir.file("s0.db")) + " " +
                        shellQuote(dir.file("s1.db")));
    EXPECT_EQ(merge.exitCode, 0) << merge.err;  // one run: both shards saw the same model
}

// `kvscope compare`: the GUI's two-constructions comparison on a ledger item, headless. Whether bf16
// live and prefill split depends on the CPU and libtorch, so live vs prefill is checked against
// what the run itself recorded for the item, and the faithful rebuild (token by token after the
// prompt) against the live cache, which holds everywhere.
TEST(RunCli, CompareRebuildsAnItemTwoWaysAsTheLedgerRecordedIt) {
    test::TempDir dir;
    const std::string db = dir.file("c.db");
    ASSERT_EQ(runCli("run " + writeExperiment(dir, "\"matched\"") + " --ledger " + shellQuote(db) +
                     " --items arith-00,arith-03")
                  .exitCode,
              0);
    const experiments::Ledger ledger(db, experiments::LedgerAccess::ReadOnly);
    for (const experiments::ItemRecord& item : ledger.items(ledger.runs().back().runId)) {
        const auto compared = runCli("compare " + shellQuote(db) + " --item " + item.itemId + " --json");
        ASSERT_EQ(compared.exitCode, 0) << compared.err;
        const auto j = nlohmann::json::parse(compared.out);
        EXPECT_EQ(j["a"]["construction"], "live");
        EXPECT_EQ(j["b"]["construction"], "prefill");
        EXPECT_EQ(j["a"]["continuation"].get<std::vector<int64_t>>(), item.trajectories.suffixLive.value());
        EXPECT_EQ(j["b"]["continuation"].get<std::vector<int64_t>>(), item.trajectories.suffixPrefill.value());
        EXPECT_EQ(j["a"]["fingerprint"], item.fingerprints.liveCache.value());
        EXPECT_EQ(j["b"]["fingerprint"], item.fingerprints.prefillCache.value());
        const auto& m = item.results.matched.value();
        EXPECT_EQ(j["first_divergence"].is_null(), !m.firstDivergence.has_value()) << item.itemId;
        if (m.firstDivergence) {
            EXPECT_EQ(j["first_divergence"], *m.firstDivergence);
        }
        EXPECT_EQ(j["diff"]["bit_exact"],
                  item.fingerprints.liveCache.value() == item.fingerprints.prefillCache.value());

        const std::string prompt = std::to_string(item.trajectories.prompt.value().size());
        const auto bridge =
            runCli("compare " + shellQuote(db) + " --item " + item.itemId + " --b incremental:" + prompt + " --json");
        ASSERT_EQ(bridge.exitCode, 0) << bridge.err;
        const auto k = nlohmann::json::parse(bridge.out);
        EXPECT_EQ(k["b"]["construction"], "incremental:" + prompt);
        EXPECT_TRUE(k["diff"]["bit_exact"].get<bool>()) << item.itemId;
        EXPECT_TRUE(k["first_divergence"].is_null()) << item.itemId;
    }
    // Other precisions and kernels per side; no element-wise difference across precisions.
    const auto mixed = runCli("compare " + shellQuote(db) +
                              " --item arith-00 --a prefill --b prefill --b-dtype fp32 --b-kernels invariant --json");
    ASSERT_EQ(mixed.exitCode, 0) << mixed.err;
    const auto x = nlohmann::json::parse(mixed.out);
    EXPECT_EQ(x["b"]["dtype"], "fp32");
    EXPECT_EQ(x["b"]["kernels"], "invariant");
    EXPECT_NE(x["b"]["label"].get<std::string>().find("invariant kernels"), std::string::npos);
    EXPECT_TRUE(x["diff"].is_null());
    const auto text = runCli("compare " + shellQuote(db) + " --item arith-00");
    ASSERT_EQ(text.exitCode, 0) << text.err;
    EXPECT_NE(text.out.find("a: live"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("bit-exact:"), std::string::npos) << text.out;
    const auto missing = runCli("compare " + shellQuote(db) + " --item nope");
    EXPECT_EQ(missing.exitCode, 2);
    EXPECT_NE(missing.err.find("no item 'nope'"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace kvscope
