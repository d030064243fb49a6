// SPDX-License-Identifier: MIT
#pragma once
// Pieces every CLI command shares: model/device/thread options, loading with warnings on stderr,
// JSON for generation results.
#include "core/cache/cache_diff.h"
#include "core/cache/locator.h"
#include "core/decode/generator.h"
#include "core/model/catalog.h"
#include "core/model/transformer.h"
#include "core/text/chat_template.h"
#include "core/text/tokenizer.h"
#include "experiments/ledger.h"
#include "experiments/runner.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace kvscope::cli {

struct ModelOptions {
    std::string model;
    std::string dtype = "fp32";
    bool dtypeGiven = false;  // --dtype on the command line (else a command working on a cache takes its dtype)
    std::string device = "cpu";
    std::string kernels = "torch";        // --kernels: Numerics::kernels
    bool kernelsGiven = false;            // else a command working on a cache takes the cache's
    std::string decodeKernel = "linear";  // "mv": Numerics::matrixVectorDecode
    int threads = 0;  // 0: all cores
};

void addModelOptions(CLI::App* cmd, ModelOptions& options);

// Number checks whose refusal says what was expected ("value 0: expected a number > 0"); CLI11's own
// PositiveNumber printed its range as "0.000000 to 1.79e308" in 309 digits.
extern const CLI::Validator kPositive;     // > 0
extern const CLI::Validator kNonNegative;  // >= 0
extern const CLI::Validator kModelPath;    // a model directory or a .gguf file
// Commands that work on a saved cache compute with the dtype and kernels that built it unless --dtype
// or --kernels says otherwise: a bf16 cache continued in fp32 only fails the fingerprint check.
void takeBuildFromCache(ModelOptions& options, const std::string& cachePath);

// --max-new-tokens, --temperature, --top-k, --top-p, --seed (generate and continue share them).
struct DecodeOptions {
    int64_t maxNewTokens = 64;
    SamplingParams sampling;
};
void addDecodeOptions(CLI::App* cmd, DecodeOptions& options);

std::optional<Tokenizer> tokenizerIfPresent(const std::string& modelDir);
// --template-args: a JSON object of a chat template's keyword arguments; UsageError otherwise.
nlohmann::ordered_json templateArguments(const std::string& text);
// JSON (--json) or the text (ids when there is no tokenizer) of a generation, on stdout.
void printGeneration(const std::vector<int64_t>& promptIds, const GenerationResult& result,
                     const std::optional<Tokenizer>& tokenizer, bool json);
void addThreadsOption(CLI::App* cmd, int& threads);
void applyThreads(int threads);  // libtorch defaults to one intra-op thread here unless told
Transformer loadModel(const ModelOptions& options);

// Ctrl-C / SIGTERM set a flag that long work polls between items or steps.
void installInterruptHandler();
const std::atomic<bool>& stopRequested();
// A one-line progress bar on a terminal, plain log lines elsewhere (CI logs, Slurm output).
void showRunProgress(const experiments::RunProgress& progress);
// "kvscope run: time by step: trace 31% (75.2 s), replay ..." on stderr, largest first.
void showTimeByStep(const char* command, const experiments::RunSummary& summary);

// `cache diff`'s output, which `compare` prints too: JSON (with the [layer][head][position] grids when
// `full`) or a table per layer.
nlohmann::json cacheDiffJson(const CacheDiff& diff, bool full);
void printCacheDiff(const CacheDiff& diff);
// A locator report's ops as `cache locate --json` prints them, and its first differing op (null: none).
nlohmann::json locatorOpsJson(const LocatorReport& report);
nlohmann::json firstDifferenceJson(const LocatorReport& report);
// "first differing op: layer L OP (max |diff| X, N of M elements)" or "every op is bit-identical".
std::string firstDifferenceLine(const LocatorReport& report);

nlohmann::json stepToJson(const StepRecord& step);
nlohmann::json generationToJson(const std::vector<int64_t>& promptIds, const GenerationResult& result,
                                const std::string& text);

// Registration of each command (each lives in its own cmd_*.cpp).
void addGenerateCommand(CLI::App& app);
void addLogitsCommand(CLI::App& app);       // every position's logits of one forward
void addTokenizeCommands(CLI::App& app);
void addMakeTestModelCommand(CLI::App& app);
void addBenchCommand(CLI::App& app);
void addCacheCommands(CLI::App& app);  // cache build/info/diff/transplant/locate, continue
void addExperimentCommands(CLI::App& app);  // run, report, audit, compare, ledger merge
void addDemoCommands(CLI::App& app);        // train-demo-model, demo
void addFetchCommand(CLI::App& app);        // fetch NAME
void addTrajectoryCommands(CLI::App& app);  // import, replay

// The catalog's model, fetched into the user's cache unless it is there already; its path.
std::string ensureCatalogModel(const CatalogModel& model);

}  // namespace kvscope::cli
