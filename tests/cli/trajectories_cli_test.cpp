// SPDX-License-Identifier: MIT
// `kvscope import` and `kvscope replay`: another engine's trajectories stored as a run and replayed
// token by token. kvscope's own greedy trajectories (from `generate --json`) stand in for the engine:
// their logprobs are known exactly, so the construction that made them must reproduce them exactly.
#include "core/decode/teacher_forced.h"
#include "core/model/transformer.h"
#include "core/util/threads.h"
#include "experiments/ledger.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace kvscope {
namespace {

using nlohmann::json;
using test::runCli;
using test::shellQuote;

const char* const kPrompts[] = {"1,2,3,4,5", "7,8,9", "11,12,13,14,15,16,17"};

// One trajectory line in the import format from `kvscope generate --json` on `model`.
json trajectoryFromGenerate(const std::string& model, const std::string& id, const std::string& prompt,
                            const std::string& kernels) {
    const auto r = runCli("generate --model " + shellQuote(model) + " --prompt-ids " + prompt +
                          " --max-new-tokens 24 --dtype bf16 --threads 1 --json --kernels " + kernels);
    EXPECT_EQ(r.exitCode, 0) << r.err;
    const json g = json::parse(r.out);
    json logprobs = json::array();
    for (const json& step : g["steps"]) logprobs.push_back(step["logprob"]);
    return {{"id", id},
            {"prompt_ids", g["prompt_ids"]},
            {"output_ids", g["generated_ids"]},
            {"logprobs", logprobs},
            {"top_logprobs", nullptr},
            {"engine", "kvscope generate"},
            {"dtype", "bf16"},
            {"batch_size", 1},
            {"temperature", 0.0},
            {"answer", nullptr}};
}

std::vector<json> kvscopeTrajectories(const std::string& model, const std::string& kernels) {
    std::vector<json> lines;
    for (std::size_t k = 0; k < std::size(kPrompts); ++k)
        lines.push_back(trajectoryFromGenerate(model, "t" + std::to_string(k), kPrompts[k], kernels));
    return lines;
}

std::string writeLines(const test::TempDir& dir, const std::string& name, const std::vector<json>& lines) {
    std::string text;
    for (const json& line : lines) text += line.dump() + "\n";
    test::writeTextFile(dir.file(name), text);
    return dir.file(name);
}

// `kvscope import`; returns the run id it prints.
std::string importRun(const std::string& file, const std::string& db, const std::string& model) {
    const auto r =
        runCli("import " + shellQuote(file) + " --ledger " + shellQuote(db) + " --model " + shellQuote(model));
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
}

json replay(const std::string& db, const std::string& run, const std::string& flags) {
    const auto r = runCli("replay " + shellQuote(db) + " --run " + run + " --threads 1 --json " + flags);
    EXPECT_EQ(r.exitCode, 0) << r.err;
    return r.exitCode == 0 ? json::parse(r.out) : json();
}

std::vector<double> replayedLogprobs(const json& report) {
    std::vector<double> out;
    for (const json& t : report["trajectories"])
        for (const json& token : t["tokens"]) out.push_back(token["logprob"].get<double>());
    return out;
}

TEST(ReplayCli, TheConstructionThatMadeKvscopesTrajectoriesReproducesTheirLogprobsExactly) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2-wide");
    const std::string db = dir.file("l.db");
    const std::string run = importRun(writeLines(dir, "torch.jsonl", kvscopeTrajectories(model, "torch")), db, model);

    const json live = replay(db, run, "--reference live");
    EXPECT_EQ(live["label"], "live/torch/bf16");
    EXPECT_EQ(live["summary"]["trajectories"], 3);
    EXPECT_EQ(live["summary"]["tokens"], 72);
    for (const json& t : live["trajectories"]) {
        EXPECT_TRUE(t["first_argmax_mismatch"].is_null()) << t["id"] << ": greedy tokens are the live argmax";
        for (const json& token : t["tokens"]) {
            EXPECT_EQ(token["delta"].get<double>(), 0.0) << t["id"] << ": live decoding made these logprobs";
            EXPECT_EQ(token["rank"], 1);
        }
    }
}

TEST(ReplayCli, AOneForwardReplaySeesWhereTorchKernelsPartLiveFromPrefill) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2-wide");
    const std::string db = dir.file("l.db");
    const std::string run = importRun(writeLines(dir, "torch.jsonl", kvscopeTrajectories(model, "torch")), db, model);
    // The trainer's view of the live decoder's tokens: one forward, whose logprobs differ where torch
    // kernels give a prefill other bits than decoding (test_support.h: not on every CPU and libtorch).
    const json prefill = replay(db, run, "--reference prefill");
    EXPECT_EQ(prefill["summary"]["by_batch_size"]["1"]["tokens"], 72);
    if (prefill["summary"]["max_abs_delta"].get<double>() == 0.0)
        GTEST_SKIP() << test::noSplitHere("the one-forward logprobs equal the live ones bit for bit");
    const json live = replay(db, run, "--reference live");
    EXPECT_EQ(live["summary"]["max_abs_delta"], 0.0) << "decoding made them";
    // Live replays the engine exactly, so live against prefill is the engine against prefill.
    double largest = 0;
    for (const json& t : live["trajectories"])
        largest = std::max(largest, t["max_abs_delta_vs"]["prefill/torch/bf16"].get<double>());
    EXPECT_EQ(largest, prefill["summary"]["max_abs_delta"].get<double>());
}

TEST(ReplayCli, WithInvariantKernelsLivePrefillAndChunkedAreOneConstruction) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2-wide");
    const std::string db = dir.file("l.db");
    const auto lines = kvscopeTrajectories(model, "invariant");
    const std::string run = importRun(writeLines(dir, "inv.jsonl", lines), db, model);
    std::vector<double> engine;
    for (const json& line : lines)
        for (const json& lp : line["logprobs"]) engine.push_back(lp.get<double>());
    for (const char* reference : {"live", "prefill", "chunked:1", "chunked:4"}) {
        const json r = replay(db, run, std::string("--kernels invariant --reference ") + reference);
        EXPECT_EQ(replayedLogprobs(r), engine) << reference;
        EXPECT_EQ(r["summary"]["max_abs_delta"], 0.0) << reference;
    }
    // Every replay stored so far, against the last one: the same logprobs.
    const json last = replay(db, run, "--kernels invariant --reference chunked:4");
    for (const json& t : last["trajectories"]) {
        EXPECT_EQ(t["max_abs_delta_vs"].size(), 3u);
        for (const auto& [other, delta] : t["max_abs_delta_vs"].items()) EXPECT_EQ(delta, 0.0) << other;
    }
    EXPECT_EQ(last["summary"]["versus"].size(), 3u);
    for (const auto& [other, v] : last["summary"]["versus"].items()) {
        EXPECT_EQ(v["max_abs_delta"], 0.0) << other;
        EXPECT_EQ(v["argmax_differs"], 0) << other;
    }
    // Op by op too: at a step, chunked:4 and live compute every op alike (`replay --locate`).
    const json located =
        replay(db, run, "--kernels invariant --reference chunked:4 --locate t1:2 --against live/invariant/bf16");
    EXPECT_EQ(located["item"], "t1");
    EXPECT_EQ(located["a"], "chunked:4");
    EXPECT_EQ(located["b"], "live");
    EXPECT_EQ(located["model"], "invariant/bf16");
    EXPECT_EQ(located["position"], 3 + 2 - 1) << "the position whose logits score output[2]: prompt 7,8,9";
    EXPECT_GT(located["ops"].size(), 10u);
    EXPECT_TRUE(located["first_difference"].is_null()) << located["first_difference"];
    const std::string base = "replay " + shellQuote(db) + " --run " + run + " --kernels invariant ";
    for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
             {"--locate t1", "expected ITEM:STEP"},
             {"--locate nope:1", "has no item 'nope'"},
             {"--locate t1:24", "step 24 is outside its 24 output tokens"},
             {"--locate t1:2 --against sideways/torch/bf16", "reference 'sideways'"},
             {"--against live/invariant/bf16", "--against goes with --locate"}}) {
        const auto r = runCli(base + flags);
        EXPECT_EQ(r.exitCode, 2) << flags << ": " << r.err;
        EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
    }
}

TEST(ReplayCli, APlantedWrongTokenIsFoundAtItsIndex) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2");
    auto lines = kvscopeTrajectories(model, "invariant");
    auto& output = lines[1]["output_ids"];
    const int64_t planted = (output[9].get<int64_t>() + 1) % 100;
    output[9] = planted;
    const std::string db = dir.file("l.db");
    const std::string run = importRun(writeLines(dir, "planted.jsonl", lines), db, model);
    const json r = replay(db, run, "--kernels invariant --reference live");
    const json& t = r["trajectories"][1];
    EXPECT_EQ(t["first_argmax_mismatch"], 9);
    EXPECT_GT(t["tokens"][9]["rank"].get<int64_t>(), 1);
    EXPECT_NE(t["tokens"][9]["delta"].get<double>(), 0.0);
    EXPECT_TRUE(r["trajectories"][0]["first_argmax_mismatch"].is_null());
    EXPECT_EQ(r["summary"]["trajectories_with_argmax_mismatch"], 1);
}

// Each precision replays under its own label with the model loaded that way: its logprobs are those
// of scoreContinuation on a Transformer loaded with the precision's dtype and numerics, bit for bit,
// and the remedies give other logprobs than the plain bf16 replay.
TEST(ReplayCli, EachPrecisionIsTheModelLoadedWithItsDtypeAndNumerics) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2");
    const std::string db = dir.file("l.db");
    const auto lines = kvscopeTrajectories(model, "torch");
    const std::string run = importRun(writeLines(dir, "t.jsonl", lines), db, model);
    const test::ThreadCountGuard threads;
    configureThreads(1);  // as the replays run (--threads 1)
    std::vector<std::string> precisions = {"bf16", "bf16-lmhead-fp32", "layercast", "fp32"};
    if (cpuMultipliesFp16()) precisions.push_back("fp16");
    for (const std::string& name : precisions) {
        const json r = replay(db, run, "--precision " + name);
        EXPECT_EQ(r["label"], "prefill/torch/" + name);
        const Precision precision = parsePrecision(name);
        Numerics numerics;
        numerics.mixed = precision.mixed;
        const Transformer t = Transformer::load(model, parseDtype(precision.dtype), torch::kCPU, nullptr, numerics);
        std::vector<double> expected;
        for (const json& line : lines)
            for (const ForcedScore& s : scoreContinuation(t, line["prompt_ids"].get<std::vector<int64_t>>(),
                                                          line["output_ids"].get<std::vector<int64_t>>(), {}))
                expected.push_back(s.logprob);
        EXPECT_EQ(replayedLogprobs(r), expected) << name;
        if (name == "bf16") continue;
        double largest = 0;  // against the plain bf16 replay
        for (const json& traj : r["trajectories"])
            largest = std::max(largest, traj["max_abs_delta_vs"]["prefill/torch/bf16"].get<double>());
        EXPECT_GT(largest, 0.0) << name;
        const json& versus = r["summary"]["versus"]["prefill/torch/bf16"];
        EXPECT_EQ(versus["max_abs_delta"].get<double>(), largest) << name << ": the run's figure is its trajectories'";
        EXPECT_EQ(versus["tokens"], 72) << name;
    }
    const auto report = runCli("report " + shellQuote(db) + " --run " + run + " --format json");
    ASSERT_EQ(report.exitCode, 0) << report.err;
    EXPECT_EQ(json::parse(report.out)["replays"].size(), precisions.size());
}

TEST(ReplayCli, ResumesAndRefusesAnotherModelAStudyRunAndUnbuiltChoices) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2");
    const std::string db = dir.file("l.db");
    const std::string run = importRun(writeLines(dir, "t.jsonl", kvscopeTrajectories(model, "torch")), db, model);
    const auto first = runCli("replay " + shellQuote(db) + " --run " + run + " --json");
    ASSERT_EQ(first.exitCode, 0) << first.err;
    EXPECT_NE(first.err.find("3/3 t2"), std::string::npos) << first.err;
    const auto again = runCli("replay " + shellQuote(db) + " --run " + run + " --json");
    EXPECT_EQ(again.exitCode, 0);
    EXPECT_EQ(again.err.find("1/"), std::string::npos) << "nothing left to replay: " << again.err;
    EXPECT_EQ(again.out, first.out);

    const auto other =
        runCli("replay " + shellQuote(db) + " --run " + run + " --model " + shellQuote(test::tinyModel("llama")));
    EXPECT_EQ(other.exitCode, 1);
    EXPECT_NE(other.err.find("not the model run " + run + " was imported with"), std::string::npos) << other.err;
    for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
             {"--run " + run + " --precision fp16 --kernels invariant", "fp16 runs on --kernels torch"},
             {"--run " + run + " --precision fp64", "expected bf16, fp32, fp16, bf16-lmhead-fp32 or layercast"},
             {"--run " + run + " --reference chunked:0", "expected prefill, live or chunked:N"},
             {"--run 0000000000000000", "no run '0000000000000000' in this ledger"}}) {
        const auto r = runCli("replay " + shellQuote(db) + " " + flags);
        EXPECT_EQ(r.exitCode, 2) << flags;
        EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
    }

    experiments::Ledger(db).createRun("5757575757575757", {{"identity", {{"config", {{"name", "a study"}}}}}});
    const auto study = runCli("replay " + shellQuote(db) + " --run 5757575757575757");
    EXPECT_EQ(study.exitCode, 2);
    EXPECT_NE(study.err.find("is a study, not imported trajectories"), std::string::npos) << study.err;

    const auto report = runCli("report " + shellQuote(db) + " --run " + run + " --format json");
    ASSERT_EQ(report.exitCode, 0) << report.err;
    const json j = json::parse(report.out);
    EXPECT_EQ(j["source"], "external");
    EXPECT_EQ(j["replays"]["prefill/torch/bf16"]["summary"]["trajectories"], 3);
    const auto csv = runCli("report " + shellQuote(db) + " --run " + run + " --format csv");
    EXPECT_NE(csv.out.find("prefill/torch/bf16,t2,1,"), std::string::npos) << csv.out;
}

TEST(ImportCli, RefusesEachMalformedLineKindNamingFileLineAndFieldAndStoresNothing) {
    test::TempDir dir;
    const std::string model = test::tinyModel("qwen2");
    const json good = {{"id", "a"},
                       {"prompt_ids", {1, 2}},
                       {"output_ids", {3, 4}},
                       {"logprobs", {-0.5, -1.0}},
                       {"top_logprobs", {{{3, -0.5}}, {{4, -1.0}, {5, -2.0}}}},
                       {"engine", "vllm"},
                       {"dtype", "bf16"},
                       {"batch_size", 8},
                       {"temperature", 1.0},
                       {"answer", "7"}};
    auto with = [&](const char* key, const json& value) {
        json line = good;
        line["id"] = "b";
        line[key] = value;
        return line.dump();
    };
    json missing = good;
    missing["id"] = "b";
    missing.erase("engine");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {with("output_ids", {3, 100000}), "field 'output_ids' entry 1 is 100000, outside the model's"},
        {with("prompt_ids", {1, 2.5}), "field 'prompt_ids': expected a token id"},
        {with("output_ids", json::array()), "field 'output_ids' must hold at least one token id"},
        {with("logprobs", {-0.5}), "field 'logprobs' has 1 entries; output_ids has 2"},
        {with("logprobs", {-0.5, nullptr}), "field 'logprobs' entry 1 is null: NaN is not a log-probability"},
        {R"({"id": "b", "prompt_ids": [1], "output_ids": [3], "logprobs": [NaN], "engine": "e", "dtype": "bf16"})",
         "NaN and Infinity are not JSON numbers"},
        {with("logprobs", {-0.5, 0.25}), "field 'logprobs' entry 1 is 0.25: a log-probability is never positive"},
        {with("top_logprobs", {{{3, -0.5}}}), "field 'top_logprobs' has 1 entries; output_ids has 2"},
        {with("top_logprobs", {{{3}}, {{4, -1.0}}}),
         "field 'top_logprobs' entry 0 must be a list of [id, logprob] pairs"},
        {with("batch_size", 0), "field 'batch_size' must be null or an integer >= 1"},
        {with("temperature", -1), "field 'temperature' must be null or a finite number >= 0"},
        {R"({"id": "b", "prompt_ids": [1], "output_ids": [3], "logprobs": [-1e400], "engine": "e", "dtype": "bf16"})",
         "not valid JSON ([json.exception.out_of_range.406] number overflow parsing '-1e400')"},
        {missing.dump(), "field 'engine' is missing"},
        {good.dump(), "field 'id' repeats 'a'"},
        {"[1, 2]", "expected one JSON object per line"},
        {"{\"id\": ", "not valid JSON"},
    };
    for (const auto& [line, message] : cases) {
        const std::string file = dir.file("bad.jsonl"), db = dir.file("never.db");
        test::writeTextFile(file, good.dump() + "\n" + line + "\n");
        const auto r =
            runCli("import " + shellQuote(file) + " --ledger " + shellQuote(db) + " --model " + shellQuote(model));
        EXPECT_EQ(r.exitCode, 1) << line;
        EXPECT_NE(r.err.find(file + ":2: "), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(message), std::string::npos) << line << "\n" << r.err;
        EXPECT_FALSE(std::filesystem::exists(db)) << "nothing is written for a refused file";
        EXPECT_FALSE(std::filesystem::exists(db + ".lock"));
    }
    // Into a ledger that holds a run already: the refused file adds nothing to it.
    const std::string db = dir.file("l.db");
    test::writeTextFile(dir.file("ok.jsonl"), good.dump() + "\n");
    importRun(dir.file("ok.jsonl"), db, model);
    test::writeTextFile(dir.file("bad.jsonl"), with("logprobs", {-0.5, 0.25}) + "\n");
    EXPECT_EQ(runCli("import " + shellQuote(dir.file("bad.jsonl")) + " --ledger " + shellQuote(db) + " --model " +
                     shellQuote(model))
                  .exitCode,
              1);
    EXPECT_EQ(experiments::Ledger(db, experiments::LedgerAccess::ReadOnly).runs().size(), 1u);
}

}  // namespace
}  // namespace kvscope
