// SPDX-License-Identifier: MIT
// The experiment engine's pieces without running a model: experiment files, datasets, answer
// extraction, the ledger, manifests and the report (golden output).
#include "experiments/dataset.h"
#include "experiments/experiment_config.h"
#include "experiments/ledger.h"
#include "experiments/manifest.h"
#include "experiments/protocols.h"
#include "experiments/report.h"

#include "core/model/transformer.h"
#include "core/util/error.h"
#include "core/util/version.h"
#include "experiments/runner.h"
#include "experiments/trajectories.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <ATen/Parallel.h>

#include <filesystem>
#include <set>

#include <unistd.h>

namespace kvscope::experiments {
namespace {

std::string writeToml(const test::TempDir& dir, const std::string& body) {
    test::writeTextFile(dir.file("data.jsonl"), "{\"id\": \"a\", \"prompt\": \"1+1\", \"answer\": \"2\"}\n");
    const std::string path = dir.file("exp.toml");
    test::writeTextFile(
        path, "[model]\ndir = \"" + test::tinyModel("qwen2") + "\"\n[dataset]\npath = \"data.jsonl\"\n" + body);
    return path;
}

template <typename E>
void expectError(const std::function<void()>& f, const std::string& fragment) {
    try {
        f();
        FAIL() << "expected an error mentioning " << fragment;
    } catch (const E& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(ExperimentConfig, DefaultsAndResolvedPaths) {
    test::TempDir dir;
    const ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    EXPECT_EQ(c.name, "exp");
    EXPECT_EQ(c.datasetPath, dir.file("data.jsonl"));
    EXPECT_EQ(c.dtypes, std::vector<std::string>{"bf16"});
    EXPECT_EQ(c.protocols.size(), allProtocols().size());
    EXPECT_TRUE(c.sampling.greedy());
    EXPECT_EQ(c.boundaryRule, BoundaryRule::Marker);
}

// Each closed choice is an enum in the config and keeps its file spelling in the manifest (run ids
// and resume compare manifests, so the spelling must not change with the type).
TEST(ExperimentConfig, ChoicesAreEnumsSpelledInTheManifestAsInTheFile) {
    test::TempDir dir;
    const ExperimentConfig c =
        ExperimentConfig::load(writeToml(dir,
                                         "[boundary]\nrule = \"fraction\"\n[answer]\nextract = \"boxed\"\n"
                                         "[transplant]\nselection = \"sample\"\nsample_fraction = 0.5\n"));
    EXPECT_EQ(c.boundaryRule, BoundaryRule::Fraction);
    EXPECT_EQ(c.answerExtract, AnswerExtraction::Boxed);
    EXPECT_EQ(c.transplantSelection, TransplantSelection::Sample);
    const nlohmann::json j = c.toJson();
    EXPECT_EQ(j["boundary"]["rule"], "fraction");
    EXPECT_EQ(j["answer"]["extract"], "boxed");
    EXPECT_EQ(j["transplant"]["selection"], "sample");
    const nlohmann::json defaults = ExperimentConfig::load(writeToml(dir, "")).toJson();
    EXPECT_EQ(defaults["boundary"]["rule"], "marker");
    EXPECT_EQ(defaults["answer"]["extract"], "last_number");
    EXPECT_EQ(defaults["transplant"]["selection"], "all");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[answer]\nextract = \"first\"\n")); },
                             "key 'answer.extract' is 'first' (expected one of boxed, last_number, regex)");
}

// Protocols and the transplant's K/V choice are enums too. The manifest lists the protocols by name in
// alphabetical order whatever order the file gives (a run's id hashes the list, so it must not move).
TEST(ExperimentConfig, ProtocolsAndKvPartsAreEnumsInTheManifestAsBefore) {
    test::TempDir dir;
    const ExperimentConfig c = ExperimentConfig::load(
        writeToml(dir, "[protocols]\nrun = [\"transplant\", \"batch\", \"matched\"]\n[transplant]\nkv = \"v\"\n"));
    EXPECT_EQ(c.protocols, (std::set<Protocol>{Protocol::Matched, Protocol::Transplant, Protocol::Batch}));
    EXPECT_TRUE(c.runs(Protocol::Batch));
    EXPECT_FALSE(c.runs(Protocol::Localize));
    EXPECT_EQ(c.transplantParts, KvParts::Values);
    const nlohmann::json j = c.toJson();
    EXPECT_EQ(j["protocols"], (std::vector<std::string>{"batch", "matched", "transplant"}));
    EXPECT_EQ(j["transplant"]["kv"], "v");
    const nlohmann::json defaults = ExperimentConfig::load(writeToml(dir, "")).toJson();
    EXPECT_EQ(defaults["protocols"],
              (std::vector<std::string>{"audit", "bridge", "fixed_prefix_2x2", "localize", "matched", "transplant"}));
    EXPECT_EQ(defaults["transplant"]["kv"], "kv");
    for (Protocol p : knownProtocols()) {
        const ExperimentConfig one =
            ExperimentConfig::load(writeToml(dir, "[protocols]\nrun = [\"" + choiceName(p) + "\"]\n"));
        EXPECT_EQ(one.protocols, std::set<Protocol>{p}) << choiceName(p);
    }
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[transplant]\nkv = \"q\"\n")); },
                             "key 'transplant.kv' is 'q' (expected one of k, kv, v)");
    expectError<ConfigError>(
        [&] { ExperimentConfig::load(writeToml(dir, "[protocols]\nrun = [\"batches\"]\n")); },
        "key 'protocols.run' is 'batches' (expected one of audit, batch, bridge, fixed_prefix_2x2, localize, "
        "matched, transplant)");
}

TEST(ExperimentConfig, UnknownKeysAndBadValuesAreErrors) {
    test::TempDir dir;
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[generation]\nmax_new_tokes = 3\n")); },
                             "unknown key 'generation.max_new_tokes'");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[extra]\nx = 1\n")); },
                             "unknown section [extra]");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[boundary]\nrule = \"middle\"\n")); },
                             "boundary.rule");
    expectError<ConfigError>(
        [&] { ExperimentConfig::load(writeToml(dir, "[protocols]\nrun = [\"matched\", \"magic\"]\n")); }, "magic");
    expectError<ConfigError>(
        [&] { ExperimentConfig::load(writeToml(dir, "[generation]\nmax_new_tokens = \"many\"\n")); },
        "generation.max_new_tokens");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[answer]\nextract = \"regex\"\n")); },
                             "answer.regex");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[model.generate]\nheads = 0\n")); },
                             "model.generate.heads' must be an integer from 1 to 256 (is 0)");
    expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, "[model.generate]\nlayers = 1000000\n")); },
                             "model.generate.layers");
    expectError<ConfigError>(
        [&] { ExperimentConfig::load(writeToml(dir, "[model.generate]\nheads = 4\nkv_heads = 3\n")); },
        "model.generate.kv_heads");
    for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
             {"[generation]\ntemperature = -0.5\n", "generation.temperature"},
             {"[generation]\ntop_p = -1.0\n", "generation.top_p"},
             {"[generation]\ntop_k = -3\n", "generation.top_k"},
             {"[boundary]\nrule = \"offset\"\noffset = -4\n", "boundary.offset"},
             {"[answer]\nextract = \"regex\"\nregex = \"Answer: ([0-9+\"\n", "answer.regex"}})
        expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, body)); }, field);
    test::writeTextFile(dir.file("broken.toml"), "[model\n");
    expectError<ConfigError>([&] { ExperimentConfig::load(dir.file("broken.toml")); }, "broken.toml");
}

// `[protocols] precisions`: the 2x2's precisions; the study's bf16 and fp32 unless told, and then
// absent from the manifest, so every earlier run keeps its id.
TEST(ExperimentConfig, PrecisionsOfTheTwoByTwo) {
    test::TempDir dir;
    const ExperimentConfig defaults = ExperimentConfig::load(writeToml(dir, ""));
    EXPECT_EQ(defaults.precisions, (std::vector<std::string>{"bf16", "fp32"}));
    EXPECT_FALSE(defaults.toJson().contains("precisions"));
    const ExperimentConfig chosen = ExperimentConfig::load(
        writeToml(dir, "[protocols]\nprecisions = [\"bf16\", \"layercast\", \"bf16-lmhead-fp32\", \"fp16\"]\n"));
    EXPECT_EQ(chosen.precisions, (std::vector<std::string>{"bf16", "layercast", "bf16-lmhead-fp32", "fp16"}));
    EXPECT_EQ(chosen.toJson()["precisions"], nlohmann::json(chosen.precisions));
    for (const auto& [body, fragment] : std::vector<std::pair<std::string, std::string>>{
             {"[protocols]\nprecisions = [\"fp64\"]\n",
              "key 'protocols.precisions' unknown precision 'fp64' (expected bf16, fp32, fp16, bf16-lmhead-fp32 or "
              "layercast)"},
             {"[protocols]\nprecisions = []\n", "key 'protocols.precisions' is empty"},
             {"[protocols]\nprecisions = [\"fp32\", \"fp32\"]\n", "names 'fp32' twice"}})
        expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, body)); }, fragment);
    test::writeTextFile(dir.file("inv.toml"), "[model]\ndir = \"" + test::tinyModel("qwen2") +
                                                  "\"\nkernels = \"invariant\"\n[dataset]\npath = \"data.jsonl\"\n"
                                                  "[protocols]\nprecisions = [\"bf16\", \"fp16\"]\n");
    expectError<ConfigError>([&] { ExperimentConfig::load(dir.file("inv.toml")); },
                             "names fp16, which invariant kernels do not compute");
}

// `[model] catalog = NAME`: the model is where `kvscope fetch NAME` puts it, in the user's cache;
// the manifest says so (and only then: older runs keep their ids).
TEST(ExperimentConfig, ACatalogModelIsTheFetchedFileInTheUsersCache) {
    test::TempDir dir;
    test::EnvironmentGuard cache("XDG_CACHE_HOME", dir.file("cache"));
    const std::string path = dir.file("cat.toml");
    test::writeTextFile(dir.file("data.jsonl"), "{\"id\": \"a\", \"prompt\": \"1+1\", \"answer\": \"2\"}\n");
    test::writeTextFile(path, "[model]\ncatalog = \"smollm2\"\n[dataset]\npath = \"data.jsonl\"\n");
    const ExperimentConfig c = ExperimentConfig::load(path);
    EXPECT_EQ(c.modelCatalog, "smollm2");
    EXPECT_EQ(c.modelDir, dir.file("cache") + "/kvscope/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    EXPECT_EQ(c.toJson()["model"]["catalog"], "smollm2");
    EXPECT_FALSE(ExperimentConfig::load(writeToml(dir, "")).toJson()["model"].contains("catalog"));

    test::writeTextFile(path, "[model]\ncatalog = \"gpt5\"\n[dataset]\npath = \"data.jsonl\"\n");
    expectError<ConfigError>([&] { ExperimentConfig::load(path); }, "model.catalog");
    expectError<ConfigError>([&] { ExperimentConfig::load(path); }, "known: smollm2");
    test::writeTextFile(path, "[model]\ncatalog = \"smollm2\"\ndir = \"m\"\n[dataset]\npath = \"data.jsonl\"\n");
    expectError<ConfigError>([&] { ExperimentConfig::load(path); }, "give one");
}

// Each committed remedy file is its study with kvscope's invariant kernels and nothing else changed
// (so `report --compare` of the two compares kernels only).
TEST(ExperimentConfig, AnInvariantStudyIsItsTorchStudyWithOtherKernelsOnly) {
    const std::string experiments = test::testDataDir() + "/../../experiments/";
    for (const auto& [torch, invariant] :
         {std::pair{"demo.toml", "demo-invariant.toml"}, std::pair{"smollm2.toml", "smollm2-invariant.toml"}}) {
        nlohmann::json a = ExperimentConfig::load(experiments + torch).toJson();
        nlohmann::json b = ExperimentConfig::load(experiments + invariant).toJson();
        EXPECT_EQ(a["model"]["kernels"], "torch") << torch;
        EXPECT_EQ(b["model"]["kernels"], "invariant") << invariant;
        for (nlohmann::json* j : {&a, &b}) {
            j->erase("name");
            j->erase("source");
            (*j)["model"].erase("kernels");
        }
        EXPECT_EQ(a, b) << torch << " and " << invariant;
    }
}

TEST(Dataset, ReadsPromptsMessagesAndPrefixIds) {
    test::TempDir dir;
    test::writeTextFile(
        dir.file("d.jsonl"),
        "{\"id\": 1, \"prompt\": \"Q\", \"answer\": 5}\n\n"
        "{\"id\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"answer\": \"x\"}\n"
        "{\"id\": \"p\", \"prefix_ids\": [1, 2, 3], \"answer\": \"7\"}\n");
    const auto items = loadDataset(dir.file("d.jsonl"));
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(items[0].id, "1");
    EXPECT_EQ(items[0].answer, "5");
    EXPECT_EQ(items[1].messages.at(0).content, "Hi");
    EXPECT_EQ(items[2].prefixIds, (std::vector<int64_t>{1, 2, 3}));
    test::writeTextFile(
        dir.file("dup.jsonl"),
        "{\"id\": 1, \"prompt\": \"a\", \"answer\": 1}\n{\"id\": 1, \"prompt\": \"b\", \"answer\": 1}\n");
    expectError<FormatError>([&] { loadDataset(dir.file("dup.jsonl")); }, "dup.jsonl:2: duplicate id");
    test::writeTextFile(dir.file("bad.jsonl"), "{\"id\": 1, \"prompt\": \"a\"}\n");
    expectError<FormatError>([&] { loadDataset(dir.file("bad.jsonl")); }, "bad.jsonl:1: field 'answer'");
}

TEST(Answers, ExtractionAndMatching) {
    EXPECT_EQ(extractAnswer("Step 1: 12+3=15. Answer: 47", AnswerExtraction::LastNumber), "47");
    EXPECT_EQ(extractAnswer("no digits", AnswerExtraction::LastNumber), std::nullopt);
    EXPECT_EQ(extractAnswer("x -5 y", AnswerExtraction::LastNumber), "-5");
    EXPECT_EQ(extractAnswer("--5", AnswerExtraction::LastNumber), "-5");
    EXPECT_EQ(extractAnswer("1.2.3", AnswerExtraction::LastNumber), "3");
    EXPECT_EQ(extractAnswer("is 3.", AnswerExtraction::LastNumber), "3");
    EXPECT_EQ(extractAnswer("a 2.50 b", AnswerExtraction::LastNumber), "2.50");
    // A 200,000-digit run overflowed std::regex's recursive matcher (fuzz_dataset_jsonl).
    EXPECT_EQ(extractAnswer("n=" + std::string(200000, '7') + " end", AnswerExtraction::LastNumber)->size(), 200000u);
    EXPECT_EQ(extractAnswer("so \\boxed{\\frac{1}{2}} done", AnswerExtraction::Boxed), "\\frac{1}{2}");
    EXPECT_EQ(extractAnswer("Answer: 3\nAnswer: 9", AnswerExtraction::Regex, "Answer: (\\d+)"), "9");
    EXPECT_EQ(extractAnswer("Answer: 3\nAnswer: 9", AnswerExtraction::Regex, "Answer: \\d+"),
              "Answer: 9");  // no group: whole match
    EXPECT_EQ(extractAnswer("x=4 x=", AnswerExtraction::Regex, "x=(\\d)?"),
              "");  // the group took no part in the last match
    EXPECT_EQ(extractAnswer("none here", AnswerExtraction::Regex, "Answer: (\\d+)"), std::nullopt);
    // Answer patterns ran on std::regex, whose recursive matcher overflows the stack on long repeats.
    EXPECT_EQ(
        extractAnswer("Answer: " + std::string(200000, '7'), AnswerExtraction::Regex, "Answer: *([0-9]+)")->size(),
        200000u);
    // Model output can end mid-character (a byte-level token): still searched, not refused.
    EXPECT_EQ(extractAnswer("Answer: 12 \xE4\xB8", AnswerExtraction::Regex, "Answer: *([0-9]+)"), "12");
    EXPECT_EQ(extractAnswer("\xC3\xA9t\xC3\xA9 = 5", AnswerExtraction::Regex, "\\p{L}+"),
              "\xC3\xA9t\xC3\xA9");  // Unicode classes
    EXPECT_TRUE(answersMatch("47.0", "47"));
    EXPECT_TRUE(answersMatch(" x ", "x"));
    EXPECT_FALSE(answersMatch("46", "47"));
}

}  // namespace
ItemRecord sampleItem(const std::string& id, int64_t index, bool divergent) {
    ItemRecord r;
    r.itemId = id;
    r.index = index;
    r.status = ItemStatus::Done;
    r.seconds = 1.5;
    r.tokens = 40;
    r.trajectories.trace = {1, 2, 3};
    r.fingerprints.comparison = "abc";
    r.results.trace = TraceResult{3, StopReason::Eos, 2};
    MatchedResult m;
    m.suffixEqual = !divergent;
    if (divergent) m.firstDivergence = 1, m.liveAtDivergence = StepSummary{7, 0.03125, 0.5, -0.25};
    m.correctLive = index % 2 == 0;
    m.correctPrefill = index % 3 == 0;
    m.suffixLengthLive = m.suffixLengthPrefill = 3;
    m.marginsLive = {0.5, 0.03125, 1.0};
    r.results.matched = m;
    r.results.bridge = BridgeResult{true, std::nullopt};
    r.results.fixedPrefix2x2 =
        FixedPrefixResult{{{"bf16", {divergent, divergent ? std::optional<int64_t>(1) : std::nullopt}}, {"fp32", {}}}};
    r.results.audit = AuditResult{true, {}};
    if (divergent) {
        r.results.transplant = TransplantResult{"all", KvParts::Both, {true, false}, {true, false}};
        r.results.localize = LocalizeResult{true, {0, 1}, KvParts::Keys, 3};
    }
    return r;
}
namespace {

// An item's trajectories and fingerprints are fields; the ledger and the comparison fingerprint see
// them by their fixed names, the present ones only (an empty trace is present, a missing one is not).
TEST(ItemRecord, TrajectoriesAndFingerprintsKeepTheirLedgerNames) {
    Trajectories t;
    t.prompt = {1, 2};
    t.trace = std::vector<int64_t>{};
    t.suffixLive = {3};
    t.batch[batchContinuationName("torch", 2)] = {4};
    using Named = std::map<std::string, std::vector<int64_t>>;
    EXPECT_EQ(t.byName(), (Named{{"prompt", {1, 2}}, {"trace", {}}, {"suffix_live", {3}}, {"batch/torch/2", {4}}}));
    EXPECT_EQ(nlohmann::json(t.byName()).dump(),
              R"({"batch/torch/2":[4],"prompt":[1,2],"suffix_live":[3],"trace":[]})");
    Trajectories back;
    for (const auto& [name, ids] : t.byName()) EXPECT_TRUE(back.set(name, ids)) << name;
    EXPECT_EQ(back, t);
    EXPECT_FALSE(back.set("suffix_middle", {1}));
    ASSERT_NE(back.find("suffix_live"), nullptr);
    EXPECT_EQ(*back.find("suffix_live"), std::vector<int64_t>{3});
    EXPECT_EQ(back.find("suffix_prefill"), nullptr);
    EXPECT_EQ(back.find("output"), nullptr);

    Fingerprints f;
    f.liveCache = "aa";
    f.comparison = "cc";
    EXPECT_EQ(f.byName(), (std::map<std::string, std::string>{{"live_cache", "aa"}, {"comparison", "cc"}}));
    Fingerprints g;
    EXPECT_TRUE(g.set("live_cache", "aa"));
    EXPECT_TRUE(g.set("comparison", "cc"));
    EXPECT_FALSE(g.set("half_cache", "bb"));
    EXPECT_EQ(g, f);
    g.prefillCache = "bb";
    EXPECT_NE(g, f);
}

TEST(Ledger, RoundTripResumeSetAndMerge) {
    test::TempDir dir;
    const nlohmann::json manifest = {{"identity", {{"config", {{"name", "t"}}}}}, {"paths", nlohmann::json::object()}};
    {
        Ledger l(dir.file("a.db"));
        l.createRun("r1", manifest);
        l.recordItem("r1", sampleItem("x", 0, true));
        EXPECT_THROW(l.recordItem("r1", sampleItem("x", 0, true)), FormatError);  // never twice
    }
    Ledger a(dir.file("a.db"));
    EXPECT_EQ(a.finishedItems("r1"), std::set<std::string>{"x"});
    const auto items = a.items("r1");
    ASSERT_EQ(items.size(), 1u);
    EXPECT_EQ(items[0].trajectories.trace.value(), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(items[0].results.matched.value().firstDivergence, 1);
    // Read back field for field, and the failed duplicate left nothing half-written.
    EXPECT_TRUE(sameResults(items[0].results, sampleItem("x", 0, true).results));
    EXPECT_EQ(toJson(items[0].results).dump(), toJson(sampleItem("x", 0, true).results).dump());

    Ledger b(dir.file("b.db"));
    b.createRun("r1", manifest);
    b.recordItem("r1", sampleItem("y", 1, false));
    b.recordItem("r1", sampleItem("x", 0, true));  // the same item, identical: fine to merge
    Ledger merged(dir.file("m.db"));
    merged.mergeFrom(a);
    merged.mergeFrom(b);
    EXPECT_EQ(merged.finishedItems("r1"), (std::set<std::string>{"x", "y"}));
    Ledger c(dir.file("c.db"));
    c.createRun("r1", manifest);
    auto changed = sampleItem("x", 0, true);
    changed.trajectories.trace = {9};
    c.recordItem("r1", changed);
    expectError<UsageError>([&] { merged.mergeFrom(c); }, "item 'x'");
}

TEST(Ledger, RefusesUnknownSchemaAndNonLedgers) {
    test::TempDir dir;
    { Ledger l(dir.file("new.db")); }
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("new.db").c_str(), &db);
    sqlite3_exec(db, "UPDATE meta SET value='99' WHERE key='schema_version'", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    expectError<FormatError>([&] { Ledger l(dir.file("new.db")); }, "schema version 99");
    test::writeTextFile(dir.file("text.db"), std::string(4096, 'x'));
    expectError<FormatError>([&] { Ledger l(dir.file("text.db")); }, "not a kvscope ledger");
}

TEST(Ledger, ReadOnlyAccessNeverWritesAndRefusesWhatIsNotALedger) {
    test::TempDir dir;
    // A foreign SQLite database stays exactly as it was.
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("foreign.db").c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE notes(text TEXT); INSERT INTO notes VALUES('mine');", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    const std::string before = test::readTextFile(dir.file("foreign.db"));
    expectError<FormatError>([&] { Ledger l(dir.file("foreign.db"), LedgerAccess::ReadOnly); },
                             "foreign.db: not a kvscope ledger");
    EXPECT_EQ(test::readTextFile(dir.file("foreign.db")), before) << "no schema was added";
    // An empty file stays empty; a missing one is not created.
    test::writeTextFile(dir.file("empty.db"), "");
    expectError<FormatError>([&] { Ledger l(dir.file("empty.db"), LedgerAccess::ReadOnly); },
                             "empty.db: not a kvscope ledger");
    EXPECT_EQ(std::filesystem::file_size(dir.file("empty.db")), 0u);
    expectError<FormatError>([&] { Ledger l(dir.file("missing.db"), LedgerAccess::ReadOnly); },
                             "missing.db: cannot open ledger");
    EXPECT_FALSE(std::filesystem::exists(dir.file("missing.db")));
    // A real ledger reads as before.
    {
        Ledger l(dir.file("real.db"));
        l.createRun("r1", {{"identity", {{"config", {{"name", "x"}}}}}});
    }
    EXPECT_EQ(Ledger(dir.file("real.db"), LedgerAccess::ReadOnly).runs().size(), 1u);
}

// The schema exists but its version row does not, and another connection holds the write lock past
// the busy timeout (10 s): the ledger's own first write fails. That refusal once left the connection
// open (LeakSanitizer caught it in a test that polls a ledger while a run writes it).
TEST(Ledger, AWriterBlockedPastTheBusyTimeoutIsRefusedNamingTheLedger) {
    test::TempDir dir;
    const std::string path = dir.file("l.db");
    { Ledger l(path); }
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "DELETE FROM meta; BEGIN IMMEDIATE;", nullptr, nullptr, nullptr), SQLITE_OK);
    expectError<FormatError>([&] { Ledger l(path); }, "l.db: SQLite error: database is locked");
    sqlite3_exec(other, "ROLLBACK;", nullptr, nullptr, nullptr);
    sqlite3_close(other);
    EXPECT_NO_THROW(Ledger l(path));
}

TEST(Ledger, OneWriterAtATime) {
    test::TempDir dir;
    const std::string db = dir.file("l.db");
    {
        const LedgerWriteLock held(db);
        expectError<UsageError>([&] { LedgerWriteLock second(db); }, "pid " + std::to_string(::getpid()));
    }
    const LedgerWriteLock again(db);  // released with the first holder
}

TEST(ExperimentConfig, AGeneratedModelInterruptedBeforeItsConfigIsGeneratedAgain) {
    test::TempDir dir;
    const std::string path = writeToml(dir, "[model.generate]\narch = \"qwen2\"\n");
    std::string toml = test::readTextFile(path);
    const std::size_t at = toml.find("dir = \"");
    toml.replace(at, toml.find('\n', at) - at, "dir = \"gen\"");
    test::writeTextFile(path, toml);
    const ExperimentConfig c = ExperimentConfig::load(path);
    // What a kill during generation leaves: some files, a stray .partial, no config.json.
    std::filesystem::create_directories(c.modelDir);
    test::writeTextFile(c.modelDir + "/tokenizer.json", "{\"truncated");
    test::writeTextFile(c.modelDir + "/model.safetensors.partial", "half");
    c.generateModelIfMissing();
    EXPECT_FALSE(std::filesystem::exists(c.modelDir + "/model.safetensors.partial"));
    EXPECT_NO_THROW(Transformer::load(c.modelDir, torch::kFloat32, torch::kCPU));
}

TEST(Manifest, HashesInputsAndNamesWhatChanged) {
    test::TempDir dir;
    const ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    const auto m1 = buildManifest(c);
    EXPECT_TRUE(m1["identity"]["files"].contains("model/model.safetensors"));
    EXPECT_TRUE(m1["identity"]["files"].contains("dataset/data.jsonl"));
    EXPECT_EQ(runIdOf(m1), runIdOf(buildManifest(c)));
    test::writeTextFile(dir.file("data.jsonl"), "{\"id\": \"a\", \"prompt\": \"1+2\", \"answer\": \"3\"}\n");
    const auto m2 = buildManifest(c);
    EXPECT_NE(runIdOf(m1), runIdOf(m2));
    EXPECT_EQ(describeManifestChange(m1, m2), "file dataset/data.jsonl changed");
}

TEST(Manifest, DescribeRunReadsTheTypedFieldsAndToleratesAnOlderManifest) {
    test::TempDir dir;
    ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    c.dtypes = {"bf16", "fp32"};
    c.kernels = Kernels::Invariant;
    const RunDescription d = describeRun(buildManifest(c));
    EXPECT_EQ(d.experimentPath, dir.file("exp.toml"));
    EXPECT_EQ(d.modelPath, test::tinyModel("qwen2"));
    EXPECT_EQ(d.datasetPath, dir.file("data.jsonl"));
    EXPECT_EQ(d.dtypes, (std::vector<std::string>{"bf16", "fp32"}));
    EXPECT_EQ(d.device, "cpu");
    EXPECT_EQ(d.kernels, Kernels::Invariant);
    const RunDescription old = describeRun(nlohmann::json{{"paths", {{"model", 7}}}});
    EXPECT_TRUE(old.modelPath.empty() && old.experimentPath.empty() && old.dtypes.empty());
    EXPECT_EQ(old.kernels, Kernels::Torch) << "runs from before the choice existed used torch's kernels";
}

TEST(Manifest, RecordsTheEnvironmentThatDecidesTheBits) {
    test::TempDir dir;
    ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    const test::ThreadCountGuard restore;
    at::set_num_threads(1);
    const auto one = buildManifest(c);
    const nlohmann::json& e = one["identity"]["environment"];
    EXPECT_EQ(e["libtorch"], libtorchVersion());
    EXPECT_EQ(e["cpu"], cpuVectorFeatures());
    EXPECT_EQ(e["threads"], 1) << "torch kernels split reductions by thread count";
    EXPECT_FALSE(e["fp32_products"].get<std::string>().empty());
    EXPECT_TRUE(one["machine"].contains("cpu_model"));

    at::set_num_threads(2);
    const auto two = buildManifest(c);
    EXPECT_NE(runIdOf(one), runIdOf(two));
    EXPECT_TRUE(sameInputs(one, two));
    const std::string change = describeManifestChange(one, two);
    EXPECT_NE(change.find("1 thread;"), std::string::npos) << change;
    EXPECT_NE(change.find("2 threads"), std::string::npos) << change;

    c.kernels = Kernels::Invariant;  // the same bits on any thread count
    const auto invariantOne = buildManifest(c);
    at::set_num_threads(1);
    EXPECT_EQ(runIdOf(invariantOne), runIdOf(buildManifest(c)));
    EXPECT_FALSE(invariantOne["identity"]["environment"].contains("threads"));

    // Another build's values, which no real libtorch has (this one may be 1.13 or 2.x).
    nlohmann::json otherBuild = one;
    otherBuild["identity"]["environment"]["libtorch"] = "0.0.0-elsewhere";
    EXPECT_NE(describeManifestChange(one, otherBuild).find("libtorch 0.0.0-elsewhere"), std::string::npos);
    EXPECT_NE(environmentText(nlohmann::json()).find("did not record"), std::string::npos);
}

TEST(Manifest, AResumeInAnotherEnvironmentIsRefusedNamingBothSides) {
    test::TempDir dir;
    const ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    RunOptions o;
    o.ledgerPath = dir.file("ledger.db");
    o.limit = 0;  // opening the run is what is tested
    const std::atomic<bool> noStop{false};
    const test::ThreadCountGuard restore;
    o.threads = 1;
    runExperiment(c, o, [](const RunProgress&) {}, noStop);
    o.threads = 2;
    expectError<UsageError>([&] { runExperiment(c, o, [](const RunProgress&) {}, noStop); },
                            "the run has libtorch " + libtorchVersion());
    o.newRun = true;  // a new run beside it is what --new-run is for
    EXPECT_NO_THROW(runExperiment(c, o, [](const RunProgress&) {}, noStop));
    EXPECT_EQ(Ledger(o.ledgerPath, LedgerAccess::ReadOnly).runs().size(), 2u);
}

// `c` run in-process on one thread into `ledgerPath`, every item.
RunSummary runOnOneThread(const ExperimentConfig& c, const std::string& ledgerPath) {
    RunOptions o;
    o.ledgerPath = ledgerPath;
    o.threads = 1;
    const test::ThreadCountGuard restore;
    const std::atomic<bool> noStop{false};
    return runExperiment(c, o, [](const RunProgress&) {}, noStop);
}

// fixed_prefix_2x2 over the remedies: one cell per chosen precision, each timed as its own step, in
// the report (JSON, Markdown, CSV). With invariant kernels no precision's continuations split.
TEST(Protocols, TheTwoByTwoComparesEveryChosenPrecisionAndTimesEach) {
    std::vector<std::string> precisions = {"bf16", "fp32", "bf16-lmhead-fp32", "layercast"};
    if (cpuMultipliesFp16()) precisions.push_back("fp16");
    for (const char* kernels : {"torch", "invariant"}) {
        test::TempDir dir;
        const bool invariant = std::string(kernels) == "invariant";
        std::vector<std::string> chosen = precisions;
        if (invariant) chosen.erase(std::remove(chosen.begin(), chosen.end(), "fp16"), chosen.end());
        std::string names;
        for (const std::string& p : chosen) names += (names.empty() ? "\"" : ", \"") + p + "\"";
        writeToml(dir, "");  // its dataset
        test::writeTextFile(
            dir.file("2x2.toml"),
            "[model]\ndir = \"" + test::tinyModel("qwen2") + "\"\nkernels = \"" + kernels +
                "\"\n[dataset]\npath = \"data.jsonl\"\n"
                "[generation]\nmax_new_tokens = 24\nignore_eos = true\n[boundary]\nrule = \"fraction\"\n"
                "[protocols]\nrun = [\"matched\", \"fixed_prefix_2x2\"]\nprecisions = [" +
                names + "]\n");
        const ExperimentConfig c = ExperimentConfig::load(dir.file("2x2.toml"));
        const RunSummary summary = runOnOneThread(c, dir.file("ledger.db"));
        ASSERT_EQ(summary.items.size(), 1u);
        for (const std::string& p : chosen)
            EXPECT_EQ(summary.items[0].secondsBy.count("fixed_prefix_2x2 " + p), 1u) << kernels << " " << p;
        const Ledger ledger(dir.file("ledger.db"), LedgerAccess::ReadOnly);
        const auto items = ledger.items(summary.runId);
        ASSERT_EQ(items.size(), 1u);
        ASSERT_TRUE(items[0].results.fixedPrefix2x2.has_value());
        EXPECT_EQ(items[0].results.fixedPrefix2x2->byPrecision.size(), chosen.size());
        const RunReport report = buildReport(items, ledger.run(summary.runId));
        const nlohmann::json r = toJson(report);
        for (const std::string& p : chosen) {
            EXPECT_EQ(r["fixed_prefix_2x2"][p]["n"], 1) << kernels << " " << p;
            if (invariant) {
                EXPECT_EQ(r["fixed_prefix_2x2"][p]["disagree"], 0) << p << ": live == prefill";
            }
        }
        // The bf16 cell continues the main precision's prefill side: it splits exactly when matched does.
        EXPECT_EQ(r["fixed_prefix_2x2"]["bf16"]["disagree"], r["matched"]["suffix_differ"]) << kernels;
        EXPECT_NE(reportMarkdown(report).find("| layercast | 1 | "), std::string::npos) << reportMarkdown(report);
        const std::string csv = itemsCsv(items);
        const std::string fp16 = invariant || !cpuMultipliesFp16() ? "" : "disagree_fp16,";
        EXPECT_NE(csv.find(",seconds," + fp16 + "disagree_bf16-lmhead-fp32,disagree_layercast\n"), std::string::npos)
            << csv;
    }
}

// The batch protocol: each item alone and as the first row of left-padded batches of 2 and 4 (fillers:
// the dataset's next items), with torch and invariant kernels. With invariant kernels nothing depends
// on the batch: logits, caches and greedy suffixes equal to alone, no op differs. What torch kernels
// do is the finding; their cells must agree with themselves.
TEST(Protocols, TheBatchProtocolFindsNothingWithInvariantKernels) {
    test::TempDir dir;
    std::string lines;
    for (const char* p : {"12+7=", "3*4+1=", "100-58=", "9*9=", "1+2+3+4+5="})
        lines += std::string("{\"id\": \"") + p + "\", \"prompt\": \"" + p + "\", \"answer\": \"0\"}\n";
    test::writeTextFile(dir.file("data.jsonl"), lines);
    test::writeTextFile(dir.file("batch.toml"), "[model]\ndir = \"" + test::tinyModel("qwen2-wide") +
                                                    "\"\n[dataset]\npath = \"data.jsonl\"\nchat_template = \"plain\"\n"
                                                    "[generation]\nmax_new_tokens = 16\nignore_eos = true\n"
                                                    "[boundary]\nrule = \"fraction\"\n"
                                                    "[protocols]\nrun = [\"batch\"]\n[batch]\nsizes = [4, 2]\n");
    const ExperimentConfig c = ExperimentConfig::load(dir.file("batch.toml"));
    EXPECT_EQ(c.batchSizes, (std::vector<int64_t>{1, 2, 4}));
    EXPECT_EQ(c.toJson()["batch"]["sizes"], nlohmann::json({1, 2, 4}));
    const RunSummary summary = runOnOneThread(c, dir.file("ledger.db"));
    const Ledger ledger(dir.file("ledger.db"), LedgerAccess::ReadOnly);
    const auto items = ledger.items(summary.runId);
    ASSERT_EQ(items.size(), 5u);
    for (const ItemRecord& item : items) {
        ASSERT_TRUE(item.results.batch.has_value()) << item.itemId;
        for (const char* kernels : {"torch", "invariant"}) {
            const auto& sizes = item.results.batch->byKernels.at(kernels);
            ASSERT_EQ(sizes.size(), 2u) << kernels;
            // Each size's continuation is kept beside alone's (the GUI shows them side by side).
            const auto& alone = item.trajectories.batch.at(batchContinuationName(kernels, 1));
            EXPECT_EQ(alone.size(), 16u);
            for (const auto& [size, cell] : sizes) {
                const std::string where = item.itemId + " " + kernels + " " + std::to_string(size);
                const int64_t split =
                    firstDivergence(alone, item.trajectories.batch.at(batchContinuationName(kernels, size)));
                EXPECT_EQ(cell.firstDivergence.value_or(-1), split) << where;
                if (std::string(kernels) == "invariant") {
                    EXPECT_TRUE(cell.logitsEqual && cell.cacheEqual) << where;
                    EXPECT_FALSE(cell.firstDivergence.has_value()) << where;
                    EXPECT_FALSE(cell.firstDifferingOp.has_value()) << where;
                }
                if (cell.firstDivergence) {
                    EXPECT_FALSE(cell.logitsEqual) << where << ": greedy tokens split only where logits differ";
                    EXPECT_TRUE(cell.marginAtDivergence.has_value()) << where;
                }
                EXPECT_EQ(cell.firstDifferingOp.has_value(), !cell.logitsEqual) << where;
                if (!cell.cacheEqual) {
                    EXPECT_EQ(cell.firstDifferingOp.value_or("").rfind("step 0, ", 0), 0u) << where;
                }
            }
        }
    }
    // Stored and read back: the same values.
    EXPECT_TRUE(sameResults(itemResultsFromJson(toJson(items[0].results), "test"), items[0].results));
    const RunReport report = buildReport(items, ledger.run(summary.runId));
    const nlohmann::json r = toJson(report);
    for (const char* size : {"2", "4"}) {
        EXPECT_EQ(r["batch"]["invariant"][size]["n"], 5);
        EXPECT_EQ(r["batch"]["invariant"][size]["logits_equal"], 5);
        EXPECT_EQ(r["batch"]["invariant"][size]["suffix_split"], 0);
        EXPECT_TRUE(r["batch"]["invariant"][size]["first_differing_op"].is_null());
        EXPECT_EQ(r["batch"]["torch"][size]["n"], 5);
    }
    const std::string md = reportMarkdown(report);
    EXPECT_NE(md.find("\n\n## batch"), std::string::npos);
    EXPECT_EQ(md.find("## matched"), std::string::npos) << "a batch-only run shows no empty study";
    EXPECT_NE(md.find("| invariant | 4 | 5 | 5 | 5 | 0 | - | - | - |"), std::string::npos) << md;
}

// Every experiment file shipped in experiments/ is one this code reads (the demo, the SmolLM2 study,
// the invariant and batch variants).
TEST(ExperimentConfig, EveryShippedExperimentFileLoads) {
    int files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(test::testDataDir() + "/../../experiments"))
        if (entry.path().extension() == ".toml") {
            ++files;
            EXPECT_NO_THROW(ExperimentConfig::load(entry.path().string())) << entry.path();
        }
    EXPECT_GE(files, 8);
}

TEST(ExperimentConfig, TheBatchSectionRefusesWhatItCannotRun) {
    test::TempDir dir;
    for (const auto& [body, fragment] : std::vector<std::pair<std::string, std::string>>{
             {"[batch]\npadding = \"right\"\n", "key 'batch.padding' is 'right' (expected \"left\""},
             {"[batch]\nsizes = [0, 2]\n", "key 'batch.sizes' holds 0 (expected 1 to 64)"},
             {"[batch]\nsizes = [2.5]\n", "key 'batch.sizes' must be an array of integers"},
             {"[batch]\nsize = [2]\n", "unknown key 'batch.size'"}})
        expectError<ConfigError>([&] { ExperimentConfig::load(writeToml(dir, body)); }, fragment);
    EXPECT_FALSE(ExperimentConfig::load(writeToml(dir, "")).toJson().contains("batch")) << "run ids unchanged";
}

TEST(Ledger, AMergeOfShardsFromOtherEnvironmentsIsRefusedUnlessAllowedAndThenSaysSo) {
    test::TempDir dir;
    ExperimentConfig c = ExperimentConfig::load(writeToml(dir, ""));
    const nlohmann::json here = buildManifest(c);
    nlohmann::json elsewhere = here;
    elsewhere["identity"]["environment"]["libtorch"] = "0.0.0-elsewhere";
    elsewhere["identity"]["environment"]["fp32_products"] = "OpenBLAS Elsewhere";
    {
        Ledger a(dir.file("a.db")), b(dir.file("b.db"));
        a.createRun(runIdOf(here), here);
        a.recordItem(runIdOf(here), sampleItem("x", 0, true));
        b.createRun(runIdOf(elsewhere), elsewhere);
        b.recordItem(runIdOf(elsewhere), sampleItem("y", 1, false));
    }
    try {
        mergeLedgers(dir.file("out.db"), {dir.file("a.db"), dir.file("b.db")});
        FAIL() << "a merge across environments went through";
    } catch (const UsageError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(dir.file("b.db")), std::string::npos) << what;
        EXPECT_NE(what.find("libtorch 0.0.0-elsewhere, fp32 on OpenBLAS Elsewhere"), std::string::npos) << what;
        EXPECT_NE(what.find("libtorch " + libtorchVersion()), std::string::npos) << what;
        EXPECT_NE(what.find("--allow-mixed-environments"), std::string::npos) << what;
    }
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.db"))) << "a refused merge leaves nothing behind";

    const auto runs = mergeLedgers(dir.file("out.db"), {dir.file("a.db"), dir.file("b.db")}, MergeOptions{true});
    ASSERT_EQ(runs.size(), 1u) << "with the flag, one run holds both shards' items";
    EXPECT_EQ(runs[0].itemsDone, 2);
    const nlohmann::json& mixed = runs[0].manifest["mixed_environments"];
    ASSERT_EQ(mixed.size(), 2u);
    EXPECT_EQ(mixed[1]["libtorch"], "0.0.0-elsewhere");
    const Ledger out(dir.file("out.db"), LedgerAccess::ReadOnly);
    const std::string md = reportMarkdown(buildReport(out.items(runs[0].runId), runs[0]));
    EXPECT_NE(md.find("**Mixed environments**"), std::string::npos) << md;
    EXPECT_NE(md.find("libtorch 0.0.0-elsewhere"), std::string::npos) << md;
}

TEST(Protocols, FirstDivergenceAndTheTransplantVerdict) {
    const std::vector<int64_t> donor = {5, 6, 7, 8}, recipient = {5, 6, 9, 10};
    EXPECT_EQ(firstDivergence(donor, donor), -1);
    EXPECT_EQ(firstDivergence(donor, recipient), 2);
    EXPECT_EQ(firstDivergence(donor, {5, 6, 7}), 3) << "a length difference counts";
    const TransplantOutcome toDonor = judgeTransplant(donor, donor, recipient);
    EXPECT_TRUE(toDonor.followsDonor);
    EXPECT_FALSE(toDonor.followsRecipient);
    EXPECT_EQ(toDonor.splitFromDonor, -1);
    const TransplantOutcome toRecipient = judgeTransplant(recipient, donor, recipient);
    EXPECT_FALSE(toRecipient.followsDonor);
    EXPECT_TRUE(toRecipient.followsRecipient);
    EXPECT_EQ(toRecipient.splitFromDonor, 2);
    const TransplantOutcome neither = judgeTransplant({5, 1}, donor, recipient);
    EXPECT_FALSE(neither.followsDonor || neither.followsRecipient);
    EXPECT_EQ(neither.splitFromDonor, 1);
    const TransplantOutcome agree = judgeTransplant(donor, donor, donor);
    EXPECT_TRUE(agree.followsDonor && agree.followsRecipient) << "donor and recipient agree: both";
}

TEST(Report, HistogramBinsHoldEveryValueOnce) {
    std::vector<ItemRecord> items;
    for (const double margin : {0.0, 0.01, 0.5, 0.5, 2.0}) {
        ItemRecord& r = items.emplace_back();
        // Filled in place: GCC 12's -O1 (the asan preset) warns of its own copy of an optional string.
        MatchedResult& m = r.results.matched.emplace();
        m.suffixEqual = false;
        m.firstDivergence = static_cast<int>(margin * 30);
        m.liveAtDivergence = StepSummary{0, margin, 0, 0};
    }
    items.emplace_back().results.matched.emplace();  // suffixes equal: in no bar
    const auto steps = histogramOf(items, ItemMeasure::FirstDivergence, 24);  // steps 0, 0, 15, 15, 60
    ASSERT_EQ(steps.size(), 21u) << "width 3: 61 steps in at most 24 bars";
    EXPECT_EQ(steps.front().count, 2);
    EXPECT_EQ(steps[5].count, 2);
    EXPECT_EQ(steps.back().count, 1);
    const auto margins = histogramOf(items, ItemMeasure::MarginAtDivergence, 4);
    ASSERT_EQ(margins.size(), 4u);
    EXPECT_EQ(margins[0].count, 2);
    EXPECT_EQ(margins[1].count, 2);
    EXPECT_EQ(margins[3].count, 1) << "the largest value falls in the last bar";
    EXPECT_GT(margins[3].upper, 2.0);

    const RunInfo run{"0123456789abcdef", {{"identity", {{"config", {{"name", "bars"}}}}}}, "", 6};
    const nlohmann::json q = toJson(buildReport(items, run))["matched"]["first_divergence"];
    EXPECT_EQ(q["n"], 5);
    EXPECT_EQ(q["median"], 15);
    EXPECT_EQ(q["max"], 60);
    ASSERT_EQ(q["histogram"].size(), 16u) << "width 4: 61 steps in at most 16 bars";
    EXPECT_EQ(q["histogram"][3], nlohmann::json::parse(R"({"from": 12, "to": 16, "count": 2})"));
    EXPECT_EQ(q["histogram"][15], nlohmann::json::parse(R"({"from": 60, "to": 64, "count": 1})"));
}

TEST(Report, GoldenOutputForAKnownLedger) {
    std::vector<ItemRecord> items;
    for (int i = 0; i < 6; ++i) items.push_back(sampleItem("item-" + std::to_string(i), i, i % 3 == 1));
    const nlohmann::json environment = {{"libtorch", "2.13.0"},
                                        {"fp32_products", "MKL"},
                                        {"bf16_products", "oneDNN (built in)"},
                                        {"cpu", "avx2 fma avx512f avx512_bf16"},
                                        {"settings", nlohmann::json::object()},
                                        {"threads", 2}};
    RunInfo run{"0123456789abcdef",
                {{"identity", {{"config", {{"name", "golden"}}}, {"environment", environment}}}},
                "2026-01-01T00:00:00Z",
                6};
    const RunReport report = buildReport(items, run);
    const nlohmann::json r = toJson(report);
    // The contract keys.
    for (const char* key : {"n", "suffix_differ", "label_differ", "accuracy_live", "accuracy_prefill", "accuracy_diff",
                            "accuracy_diff_ci", "mcnemar_p", "replicas_exact"})
        EXPECT_TRUE(r["matched"].contains(key)) << key;
    EXPECT_EQ(r["matched"]["suffix_differ"], 2);
    EXPECT_EQ(r["fixed_prefix_2x2"]["bf16"]["disagree"], 2);
    EXPECT_EQ(r["fixed_prefix_2x2"]["fp32"]["disagree"], 0);
    EXPECT_NEAR(r["fixed_prefix_2x2"]["fp32"]["wilson_upper"].get<double>(), 0.390, 1e-3);
    EXPECT_EQ(r["transplant"]["n"], 4);
    EXPECT_EQ(r["transplant"]["follows_donor"], 4);
    EXPECT_EQ(r["localize"]["layers_needed"], nlohmann::json::parse("[[0,1],[0,1]]"));
    EXPECT_EQ(r["bridge"]["exact"], 6);
    EXPECT_EQ(r["audit"]["reproduced"], 6);
    // The golden files were written from this very input and checked by hand (accuracies 3/6 and 2/6,
    // McNemar b=2 c=1 -> p = 1, Wilson 0/6 upper 39.0%); a deliberate format change rewrites them.
    EXPECT_EQ(reportMarkdown(report), test::readTextFile(test::testDataDir() + "/golden/report.md"));
    EXPECT_EQ(itemsCsv(items), test::readTextFile(test::testDataDir() + "/golden/items.csv"));
}

TEST(Replay, MismatchFiguresOfOneTrajectory) {
    EngineRecord engine;
    engine.engine = "e";
    engine.dtype = "bf16";
    engine.batchSize = 8;
    engine.logprobs = std::vector<double>{-1.0, -2.0, -0.5, -3.0};
    const std::vector<int64_t> output = {5, 6, 7, 8};
    // The replay agrees on step 0, is 0.05 higher on step 1, picks another argmax at step 2 (0.2
    // lower there) and again at step 3 (exactly equal logprob).
    const ReplayResult replay{{-1.0, -1.95, -0.7, -3.0}, {1, 1, 0.1, 0.2}, {5, 6, 9, 2}, {1, 1, 2, 3}};
    const TrajectoryMismatch m = mismatchOf("x", engine, output, replay);
    EXPECT_EQ(m.tokens, 4);
    EXPECT_EQ(m.firstArgmaxMismatch, 2);
    EXPECT_EQ(m.argmaxMismatches, 2);
    EXPECT_NEAR(m.maxAbsDelta, 0.2, 1e-12);
    EXPECT_NEAR(m.sumAbsDelta, 0.25, 1e-12);
    EXPECT_NEAR(m.sumK3, (std::exp(0.05) - 1 - 0.05) + (std::exp(-0.2) - 1 + 0.2), 1e-12);
    EXPECT_EQ(m.above[0], 2);  // |delta| > 0.01: 0.05 and 0.2
    EXPECT_EQ(m.above[1], 1);
    EXPECT_EQ(m.above[2], 0);

    ItemRecord item;
    item.itemId = "x";
    item.results.engine = engine;
    item.results.replays["live/torch/bf16"] = replay;
    item.trajectories.output = output;
    const nlohmann::json report = replayReportJson({item}, "live/torch/bf16");
    EXPECT_EQ(report["summary"]["argmax_mismatch_tokens"], 2);
    EXPECT_EQ(report["summary"]["by_batch_size"]["8"]["tokens"], 4);
    EXPECT_NEAR(report["trajectories"][0]["tokens"][1]["delta"].get<double>(), 0.05, 1e-12);
    EXPECT_EQ(replayLabels({item}), std::vector<std::string>{"live/torch/bf16"});
    // Stored and read back: the same values.
    const ItemResults back = itemResultsFromJson(toJson(item.results), "test");
    EXPECT_TRUE(sameResults(back, item.results));
    EXPECT_EQ(back.replays.at("live/torch/bf16").argmaxes, replay.argmaxes);
    EXPECT_EQ(*back.engine->logprobs, *engine.logprobs);
}

}  // namespace
}  // namespace kvscope::experiments
