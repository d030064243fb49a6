// SPDX-License-Identifier: MIT
// The malformed-input table: every kind of input kvscope reads, broken the ways users and tools break
// them. Each case must end with a non-zero exit below 128 (no crash, no signal) and one line on stderr
// that names the file (or flag) and the field, tensor or item at fault.
#include "core/cache/cache_io.h"
#include "core/model/safetensors.h"
#include "core/util/json_file.h"

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <functional>

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::shellQuote;

struct MalformedCase {
    std::string name;
    // Writes the broken input into the folder and returns the command's arguments.
    std::function<std::string(const std::string& dir)> arrange;
    std::vector<std::string> mustName;  // fragments the one-line message must contain
};

std::string q(const std::string& path) { return shellQuote(path); }

// Fills {model} (the tiny qwen2), {llama}, {weights} (a weights file, not a cache) and {cache}. Models
// are generated when a case runs, never while the table is built (test discovery must stay fast).
std::string expand(std::string args, const std::string& cache) {
    const std::pair<std::string, std::function<std::string()>> slots[] = {
        {"{model}", [] { return q(test::tinyModel("qwen2")); }},
        {"{llama}", [] { return q(test::tinyModel("llama")); }},
        {"{weights}", [] { return q(test::tinyModel("qwen2") + "/model.safetensors"); }},
        {"{cache}", [&] { return q(cache); }}};
    for (const auto& [slot, value] : slots)
        for (std::size_t at; (at = args.find(slot)) != std::string::npos;) args.replace(at, slot.size(), value());
    return args;
}

// A private copy of the tiny qwen2 model, to break.
std::string modelCopy(const std::string& dir) {
    const std::string m = dir + "/model";
    fs::copy(test::tinyModel("qwen2"), m, fs::copy_options::recursive);
    return m;
}

json readJson(const std::string& path) { return json::parse(test::readTextFile(path)); }

// Copy of the model with config.json field `key` set to `value` (null erases it); runs `generate`.
std::function<std::string(const std::string&)> configWith(const std::string& key, json value) {
    return [key, value](const std::string& dir) {
        const std::string m = modelCopy(dir);
        json c = readJson(m + "/config.json");
        if (value.is_null())
            c.erase(key);
        else
            c[key] = value;
        writeJsonFile(m + "/config.json", c);
        return "generate --model " + q(m) + " --prompt-ids 1,2,3 --max-new-tokens 2";
    };
}

// Copy of the model with tokenizer.json changed by `edit`; runs `tokenize`.
std::function<std::string(const std::string&)> tokenizerWith(std::function<void(json&)> edit) {
    return [edit](const std::string& dir) {
        const std::string m = modelCopy(dir);
        json t = readJson(m + "/tokenizer.json");
        edit(t);
        writeJsonFile(m + "/tokenizer.json", t);
        return "tokenize --model " + q(m) + " --text hello";
    };
}

// Copy of the model whose model.safetensors is rewritten by `edit` (on the raw bytes).
std::function<std::string(const std::string&)> weightBytes(std::function<void(std::string&)> edit) {
    return [edit](const std::string& dir) {
        const std::string m = modelCopy(dir);
        std::string bytes = test::readTextFile(m + "/model.safetensors");
        edit(bytes);
        test::writeTextFile(m + "/model.safetensors", bytes);
        return "generate --model " + q(m) + " --prompt-ids 1,2,3 --max-new-tokens 2";
    };
}

// Copy of the model with tensor `name` replaced (undefined: removed).
std::function<std::string(const std::string&)> weightTensor(const std::string& name,
                                                            std::function<torch::Tensor()> make) {
    return [name, make](const std::string& dir) {
        const std::string m = modelCopy(dir);
        std::vector<std::pair<std::string, torch::Tensor>> tensors;
        {
            SafetensorsFile f(m + "/model.safetensors");
            for (const auto& e : f.entries()) {
                torch::Tensor t = e.name == name ? make() : f.read(e.name).clone();
                if (t.defined()) tensors.emplace_back(e.name, t);
            }
        }
        writeSafetensors(m + "/model.safetensors", tensors);
        return "generate --model " + q(m) + " --prompt-ids 1,2,3 --max-new-tokens 2";
    };
}

// A sharded copy whose index is changed by `edit`.
std::function<std::string(const std::string&)> indexWith(std::function<void(json&)> edit) {
    return [edit](const std::string& dir) {
        const std::string m = dir + "/sharded";
        fs::copy(test::tinyModel("qwen2-sharded"), m, fs::copy_options::recursive);
        json index = readJson(m + "/model.safetensors.index.json");
        edit(index);
        writeJsonFile(m + "/model.safetensors.index.json", index);
        return "generate --model " + q(m) + " --prompt-ids 1,2,3 --max-new-tokens 2";
    };
}

// A bf16 live cache of the tiny model, its metadata or bytes changed; `command` uses it as {cache}.
std::function<std::string(const std::string&)> cacheWith(
    std::function<void(std::map<std::string, std::string>&)> editMeta,
    const std::string& command = "continue --model {model} --cache {cache}") {
    return [editMeta, command](const std::string& dir) {
        const std::string model = test::tinyModel("qwen2"), cache = dir + "/c.safetensors";
        const auto built = test::runCli("cache build --model " + q(model) +
                                        " --prompt-ids 1,2,3 --generate 4 --construction live "
                                        "--dtype bf16 --out " +
                                        q(cache));
        if (built.exitCode != 0) return std::string("cache build failed: ") + built.err;
        std::map<std::string, std::string> meta;
        std::vector<std::pair<std::string, torch::Tensor>> tensors;
        {
            SafetensorsFile f(cache);
            meta = f.metadata();
            for (const auto& e : f.entries()) tensors.emplace_back(e.name, f.read(e.name).clone());
        }
        editMeta(meta);
        writeSafetensors(cache, tensors, meta);
        const std::string args = expand(command, cache);
        return args;
    };
}

const char* kExperimentBase =
    "[model]\ndir = \"MODEL\"\n[dataset]\npath = \"data.jsonl\"\n[generation]\nmax_new_tokens = 4\n"
    "[boundary]\nrule = \"offset\"\noffset = 2\n[protocols]\nrun = [\"matched\"]\n";

// An experiment file with `extra` appended (later keys of a section are refused as duplicates by TOML,
// so cases that change a base key replace it) and a one-item dataset.
std::function<std::string(const std::string&)> experimentWith(
    const std::string& from, const std::string& to,
    const std::string& dataset = "{\"id\": \"a\", \"prompt\": \"1+1\", \"answer\": \"2\"}\n") {
    return [from, to, dataset](const std::string& dir) {
        std::string toml = kExperimentBase;
        toml.replace(toml.find("MODEL"), 5, test::tinyModel("qwen2"));
        if (!from.empty())
            toml.replace(toml.find(from), from.size(), to);
        else
            toml += to;
        test::writeTextFile(dir + "/exp.toml", toml);
        test::writeTextFile(dir + "/data.jsonl", dataset);
        return "run " + q(dir + "/exp.toml") + " --ledger " + q(dir + "/l.db");
    };
}

std::function<std::string(const std::string&)> command(const std::string& args) {
    return [args](const std::string&) { return expand(args, ""); };
}

std::vector<MalformedCase> cases() {
    auto flipHeaderLength = [](std::string& b) { b[0] = '\xff', b[1] = '\xff', b[2] = '\xff'; };
    return {
        // config.json
        {"ConfigMissing",
         [](const std::string& d) {
             const auto m = modelCopy(d);
             fs::remove(m + "/config.json");
             return "generate --model " + q(m) + " --prompt-ids 1";
         },
         {"config.json", "not found"}},
        {"ConfigNotJson",
         [](const std::string& d) {
             const auto m = modelCopy(d);
             test::writeTextFile(m + "/config.json", "{\"a\":");
             return "generate --model " + q(m) + " --prompt-ids 1";
         },
         {"config.json", "not valid JSON"}},
        {"ConfigHiddenSizeMissing", configWith("hidden_size", nullptr), {"config.json", "'hidden_size'", "missing"}},
        {"ConfigHiddenSizeText", configWith("hidden_size", "big"), {"config.json", "'hidden_size'"}},
        {"ConfigBillionLayers",
         configWith("num_hidden_layers", 1000000000),
         {"config.json", "'num_hidden_layers'", "1024"}},
        {"ConfigZeroHeads", configWith("num_attention_heads", 0), {"config.json", "'num_attention_heads'"}},
        {"ConfigKvHeadsNotDividing",
         configWith("num_key_value_heads", 3),
         {"config.json", "'num_key_value_heads'", "divide"}},
        {"ConfigNegativeEps", configWith("rms_norm_eps", -1e-6), {"config.json", "'rms_norm_eps'", "positive"}},
        {"ConfigZeroRopeTheta", configWith("rope_theta", 0), {"config.json", "'rope_theta'"}},
        {"ConfigUnknownArchitecture",
         configWith("architectures", json::array({"GPT2LMHeadModel"})),
         {"config.json", "GPT2LMHeadModel"}},
        {"ConfigGeluActivation", configWith("hidden_act", "gelu"), {"config.json", "'hidden_act'", "gelu"}},
        {"ConfigYarnScaling",
         configWith("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}),
         {"config.json", "rope_scaling", "yarn"}},
        {"ConfigHugeVocabulary", configWith("vocab_size", int64_t{1} << 40), {"config.json", "'vocab_size'"}},
        {"ConfigZeroPositions", configWith("max_position_embeddings", 0), {"config.json", "'max_position_embeddings'"}},
        {"ConfigOddHeadDim", configWith("head_dim", 15), {"config.json", "head_dim"}},
        {"ConfigNotAnObject", configWith("architectures", 5), {"config.json", "architectures"}},
        // model.safetensors
        {"WeightsTruncated", weightBytes([](std::string& b) { b.resize(b.size() / 2); }), {"model.safetensors"}},
        {"WeightsHeaderLongerThanFile", weightBytes(flipHeaderLength), {"model.safetensors", "header"}},
        {"WeightsHeaderNotJson", weightBytes([](std::string& b) { b[8] = '!'; }), {"model.safetensors", "JSON"}},
        {"WeightsTooShort", weightBytes([](std::string& b) { b.resize(5); }), {"model.safetensors"}},
        {"WeightsTensorMissing",
         weightTensor("model.layers.1.mlp.up_proj.weight", [] { return torch::Tensor(); }),
         {"model.layers.1.mlp.up_proj.weight", "missing"}},
        {"WeightsWrongShape",
         weightTensor("model.norm.weight", [] { return torch::ones({63}); }),
         {"model.norm.weight", "[63]"}},
        {"WeightsIntegerDtype",
         weightTensor("model.norm.weight", [] { return torch::ones({64}, torch::kInt32); }),
         {"model.norm.weight", "I32"}},
        {"WeightsFileMissing",
         [](const std::string& d) {
             const auto m = modelCopy(d);
             fs::remove(m + "/model.safetensors");
             return "generate --model " + q(m) + " --prompt-ids 1";
         },
         {"model.safetensors"}},
        // model.safetensors.index.json
        {"IndexWithoutWeightMap", indexWith([](json& j) { j.erase("weight_map"); }), {"index.json", "weight_map"}},
        {"IndexWrongShard",
         indexWith([](json& j) { j["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors"; }),
         {"index.json", "model.norm.weight"}},
        {"IndexShardOutsideFolder",
         indexWith([](json& j) { j["weight_map"]["model.norm.weight"] = "../x.safetensors"; }),
         {"index.json", "../x.safetensors"}},
        {"IndexOmitsATensor",
         indexWith([](json& j) { j["weight_map"].erase("model.norm.weight"); }),
         {"model.norm.weight", "weight_map does not list"}},
        {"IndexShardMissing",
         indexWith([](json& j) { j["weight_map"]["model.norm.weight"] = "nope.safetensors"; }),
         {"nope.safetensors"}},
        // tokenizer.json
        {"TokenizerUnigram",
         tokenizerWith([](json& t) { t["model"]["type"] = "Unigram"; }),
         {"tokenizer.json", "Unigram"}},
        {"TokenizerNegativeId",
         tokenizerWith([](json& t) { t["model"]["vocab"]["zz"] = -4; }),
         {"tokenizer.json", "model.vocab['zz']"}},
        {"TokenizerHugeId",
         tokenizerWith([](json& t) { t["model"]["vocab"]["zz"] = int64_t{1} << 40; }),
         {"tokenizer.json", "'zz'"}},
        {"TokenizerHugeAddedId",
         tokenizerWith([](json& t) { t["added_tokens"][0]["id"] = int64_t{1} << 40; }),
         {"tokenizer.json", "added token"}},
        {"TokenizerBadRegex",
         tokenizerWith([](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([x"; }),
         {"tokenizer.json", "does not compile"}},
        {"TokenizerLowercase",
         tokenizerWith([](json& t) { t["normalizer"] = {{"type", "Lowercase"}}; }),
         {"tokenizer.json", "Lowercase"}},
        {"TokenizerNotJson",
         [](const std::string& d) {
             const auto m = modelCopy(d);
             test::writeTextFile(m + "/tokenizer.json", "[1,");
             return "tokenize --model " + q(m) + " --text hi";
         },
         {"tokenizer.json"}},
        {"TokenizerSubwordPrefix",
         tokenizerWith([](json& t) { t["model"]["continuing_subword_prefix"] = "##"; }),
         {"tokenizer.json", "continuing_subword_prefix"}},
        // KV cache files
        {"CacheIsAWeightsFile", command("cache info {weights}"), {"model.safetensors", "not a kvscope KV cache"}},
        {"CacheEditedPromptLength",
         cacheWith([](auto& m) { m["prompt_length"] = "1"; }),
         {"c.safetensors", "metadata_seal"}},
        {"CacheEditedModel",
         cacheWith([](auto& m) { m["model_fingerprint"] = std::string(64, 'a'); }),
         {"c.safetensors", "metadata_seal"}},
        {"CacheOldFormat",
         cacheWith([](auto& m) { m["format_version"] = "1"; }),
         {"c.safetensors", "format_version 1"}},
        {"CacheBadIds", cacheWith([](auto& m) { m["token_ids"] = "[1,2,"; }), {"c.safetensors", "token_ids"}},
        {"CacheWrongDtype",
         cacheWith([](auto&) {}, "continue --model {model} --dtype fp32 --cache {cache}"),
         {"c.safetensors", "another model or dtype"}},
        {"CacheFromAnotherModel",
         cacheWith([](auto&) {}, "continue --model {llama} --cache {cache}"),
         {"c.safetensors"}},
        {"CacheTransplantNoPositions",
         cacheWith([](auto&) {},
                   "cache transplant --recipient {cache} --donor {cache} --layers all "
                   "--positions 500: --out /tmp/kvscope-never.safetensors"),
         {"selects no position"}},
        // experiment TOML
        {"ExperimentBrokenToml", experimentWith("[model]", "[model"), {"exp.toml"}},
        {"ExperimentUnknownKey", experimentWith("", "[answer]\nextrakt = \"x\"\n"), {"exp.toml", "answer.extrakt"}},
        {"ExperimentUnknownSection", experimentWith("", "[extras]\nx = 1\n"), {"exp.toml", "extras"}},
        {"ExperimentZeroTokens",
         experimentWith("max_new_tokens = 4", "max_new_tokens = 0"),
         {"exp.toml", "generation.max_new_tokens"}},
        {"ExperimentNegativeTemperature",
         experimentWith("max_new_tokens = 4", "max_new_tokens = 4\ntemperature = -1.0"),
         {"exp.toml", "generation.temperature"}},
        {"ExperimentTopPAboveOne",
         experimentWith("max_new_tokens = 4", "max_new_tokens = 4\ntop_p = 2.0"),
         {"exp.toml", "generation.top_p"}},
        {"ExperimentNegativeOffset", experimentWith("offset = 2", "offset = -4"), {"exp.toml", "boundary.offset"}},
        {"ExperimentBadRegex",
         experimentWith("", "[answer]\nextract = \"regex\"\nregex = \"([0-9\"\n"),
         {"exp.toml", "answer.regex"}},
        {"ExperimentZeroHeads",
         experimentWith("", "[model.generate]\nheads = 0\n"),
         {"exp.toml", "model.generate.heads"}},
        {"ExperimentUnknownDtype", experimentWith("[model]\n", "[model]\ndtypes = [\"int8\"]\n"), {"exp.toml", "int8"}},
        {"ExperimentUnknownProtocol",
         experimentWith("run = [\"matched\"]", "run = [\"magic\"]"),
         {"exp.toml", "magic"}},
        // found by fuzz_experiment_toml: a name the file system refuses ended in std::filesystem_error
        // found by fuzz_experiment_toml: toml++ cast a float to an integer key (1.2e85: undefined behaviour)
        {"ExperimentFloatForAnInteger",
         experimentWith("max_new_tokens = 4", "max_new_tokens = 1.2e85"),
         {"exp.toml", "generation.max_new_tokens", "integer"}},
        {"ExperimentDatasetPathTooLong",
         experimentWith("path = \"data.jsonl\"", "path = \"" + std::string(5000, 'd') + "\""),
         {"exp.toml", "dataset.path", "not a usable path"}},
        {"ExperimentMissingDataset", experimentWith("path = \"data.jsonl\"", "path = \"none.jsonl\""), {"none.jsonl"}},
        // dataset JSONL
        {"DatasetLineNotJson", experimentWith("", "", "{\"id\": \"a\", \"prompt\": \n"), {"data.jsonl:1", "JSON"}},
        {"DatasetItemWithoutPrompt",
         experimentWith("", "", "{\"id\": \"a\", \"answer\": \"2\"}\n"),
         {"data.jsonl:1", "'prompt'"}},
        {"DatasetItemWithoutAnswer",
         experimentWith("", "", "{\"id\": \"a\", \"prompt\": \"x\"}\n"),
         {"data.jsonl:1", "'answer'"}},
        {"DatasetDuplicateIds",
         experimentWith("", "",
                        "{\"id\": \"a\", \"prompt\": \"x\", \"answer\": \"1\"}\n"
                        "{\"id\": \"a\", \"prompt\": \"y\", \"answer\": \"2\"}\n"),
         {"data.jsonl", "'a'"}},
        {"DatasetEmpty", experimentWith("", "", ""), {"data.jsonl"}},
        // found by fuzz_dataset_jsonl: a float past int64 was cast with undefined behaviour, 1.5 became 1
        {"DatasetPrefixIdsHugeNumber",
         experimentWith("", "", "{\"id\": \"a\", \"prefix_ids\": [1, 3e19], \"answer\": \"2\"}\n"),
         {"data.jsonl:1", "prefix_ids", "token id"}},
        {"DatasetPrefixIdsFraction",
         experimentWith("", "", "{\"id\": \"a\", \"prefix_ids\": [1.5], \"answer\": \"2\"}\n"),
         {"data.jsonl:1", "prefix_ids", "1.5"}},
        // checked against the model when the run starts, before anything is computed
        {"DatasetPrefixIdOutsideTheVocabulary",
         experimentWith("", "", "{\"id\": \"a\", \"prefix_ids\": [1, 999999], \"answer\": \"2\"}\n"),
         {"data.jsonl:1", "field 'prefix_ids' entry 1 is 999999", "vocabulary"}},
        {"ExperimentTransplantLayersOutsideTheModel",
         experimentWith("run = [\"matched\"]", "run = [\"matched\", \"transplant\"]\n[transplant]\nlayers = \"99\""),
         {"exp.toml", "key 'transplant.layers'", "'99'", "0-1"}},
        // command-line ids, ranges and numbers
        {"IdsNotNumbers", command("generate --model {model} --prompt-ids 1,x"), {"--prompt-ids", "'x'"}},
        {"IdsOutsideVocabulary", command("generate --model {model} --prompt-ids 999999"), {"999999", "vocabulary"}},
        {"ZeroNewTokens",
         command("generate --model {model} --prompt-ids 1 --max-new-tokens 0"),
         {"--max-new-tokens", "expected"}},
        {"NegativeTemperature", command("generate --model {model} --prompt-ids 1 --temperature -1"), {"--temperature"}},
        {"UnknownConstruction",
         command("cache build --model {model} --ids-from {weights} --construction oneshot "
                 "--out /tmp/kvscope-never.safetensors"),
         {"oneshot"}},
        {"DetokenizeOutsideVocabulary", command("detokenize --model {model} --ids 1,2,99999"), {"99999"}},
        {"ShardOutOfRange",
         [](const std::string& d) { return experimentWith("", "")(d) + " --shard 3/2"; },
         {"--shard"}},
        // ledgers
        {"ReportOnEmptyFile",
         [](const std::string& d) {
             test::writeTextFile(d + "/e.db", "");
             return "report " + q(d + "/e.db");
         },
         {"e.db", "not a kvscope ledger"}},
        {"ReportOnForeignDatabase",
         [](const std::string& d) {
             sqlite3* db = nullptr;
             sqlite3_open((d + "/f.db").c_str(), &db);
             sqlite3_exec(db, "CREATE TABLE t(x);", nullptr, nullptr, nullptr);
             sqlite3_close(db);
             return "report " + q(d + "/f.db");
         },
         {"f.db", "not a kvscope ledger"}},
        {"AuditOnMissingFile", command("audit /tmp/kvscope-no-such-ledger.db"), {"kvscope-no-such-ledger.db"}},
    };
}

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

class MalformedInput : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedInput, ExitsCleanlyWithOneLineNamingWhatIsWrong) {
    const MalformedCase& c = GetParam();
    test::TempDir dir;
    const std::string args = c.arrange(dir.path());
    const test::CommandResult r = test::runCli(args);
    EXPECT_GT(r.exitCode, 0) << args;
    EXPECT_LT(r.exitCode, 128) << "a signal or crash: " << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const auto& fragment : c.mustName)
        EXPECT_NE(r.err.find(fragment), std::string::npos) << fragment << " in: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedInput, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

TEST(MalformedInputTable, HasAtLeastSixtyCases) { EXPECT_GE(cases().size(), 60u); }

// What the model decides (its layers, its vocabulary) is checked before the run takes the ledger:
// a refused run leaves neither ledger nor lock file.
TEST(MalformedInputTable, ARunRefusedForItsModelLeavesNothingBehind) {
    for (const MalformedCase& c : cases()) {
        if (c.name != "DatasetPrefixIdOutsideTheVocabulary" && c.name != "ExperimentTransplantLayersOutsideTheModel")
            continue;
        test::TempDir dir;
        EXPECT_NE(test::runCli(c.arrange(dir.path())).exitCode, 0) << c.name;
        for (const char* left : {"l.db", "l.db.lock"})
            EXPECT_FALSE(std::filesystem::exists(dir.file(left))) << c.name << ": " << left;
    }
}

}  // namespace
}  // namespace kvscope
