// SPDX-License-Identifier: MIT
#include "cli_common.h"

#include "experiments/report.h"

#include "core/cache/cache_io.h"
#include "core/model/gguf.h"
#include "core/util/error.h"

#include "core/util/threads.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>

namespace kvscope::cli {

namespace {
std::atomic<bool> gStopRequested{false};

void say(const char* text) { [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text, std::strlen(text)); }

// The first signal asks the batch to stop after the item in flight (minutes on a real model); a
// second one stops at once: the item in flight was not recorded (each item is one transaction) and
// runs again on resume. Only async-signal-safe calls here.
extern "C" void onInterrupt(int) {
    if (gStopRequested.exchange(true)) {
        say("\nkvscope: stopped at once; the item in flight is not recorded and runs again on resume\n");
        ::_exit(130);
    }
    say("\nkvscope: stopping after the item in flight (interrupt again to stop at once)\n");
}
}  // namespace

void installInterruptHandler() {
    std::signal(SIGINT, onInterrupt);
    std::signal(SIGTERM, onInterrupt);
}

const std::atomic<bool>& stopRequested() { return gStopRequested; }

// A one-line progress bar on a terminal, plain log lines elsewhere (CI logs, Slurm output).
void showTimeByStep(const char* command, const experiments::RunSummary& summary) {
    const auto secondsBy = summary.secondsByStep();
    if (secondsBy.empty() || summary.seconds <= 0) return;
    std::vector<std::pair<std::string, double>> steps(secondsBy.begin(), secondsBy.end());
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string line;
    for (const auto& [step, seconds] : steps)
        line += (line.empty() ? "" : ", ") + step + " " + std::to_string(std::lround(100 * seconds / summary.seconds)) +
                "% (" + experiments::clockTime(seconds) + ")";
    std::fprintf(stderr, "kvscope %s: time by step: %s\n", command, line.c_str());
}

void showRunProgress(const experiments::RunProgress& p) {
    static const bool terminal = ::isatty(STDERR_FILENO);
    const double fraction = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
    if (terminal) {
        const int width = 30, filled = static_cast<int>(fraction * width);
        std::fprintf(stderr, "\r[%s%s] %lld/%lld  item %-12s %7.1f tok/s  ETA %s ", std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), static_cast<long long>(p.done),
                     static_cast<long long>(p.total), p.currentItem.c_str(), p.tokensPerSecond,
                     experiments::clockTime(p.etaSeconds).c_str());
        if (p.done == p.total && p.total > 0) std::fprintf(stderr, "\n");
    } else if (p.lastStatus && p.done > 0) {
        std::fprintf(stderr, "kvscope run: %lld/%lld item %s %s (%.1f tok/s, ETA %s)\n", static_cast<long long>(p.done),
                     static_cast<long long>(p.total), p.currentItem.c_str(),
                     experiments::itemStatusName(*p.lastStatus).c_str(), p.tokensPerSecond,
                     experiments::clockTime(p.etaSeconds).c_str());
    }
    std::fflush(stderr);
}

void addThreadsOption(CLI::App* cmd, int& threads) {
    cmd->add_option("--threads", threads, "Intra-op threads (default: all cores)")->check(kNonNegative);
}

void addModelOptions(CLI::App* cmd, ModelOptions& o) {
    cmd->add_option("--model", o.model,
                    "Hugging Face model directory (config.json, *.safetensors, tokenizer.json) or llama.cpp GGUF file")
        ->required()
        ->check(kModelPath);
    cmd->add_option("--dtype", o.dtype,
                    "Compute dtype: fp32, bf16, or fp16 (CUDA, or a CPU with PyTorch 2.x's libtorch); with a cache, "
                    "default: the cache's")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
        ->each([&o](const std::string&) { o.dtypeGiven = true; });
    cmd->add_option("--device", o.device, "cpu, cuda or cuda:N");
    cmd->add_option("--kernels", o.kernels,
                    "torch (default: transformers' ops on libtorch, their bits), invariant (kvscope's "
                    "batch-invariant CPU kernels: a prefill gives the live cache's bits, the same on every CPU) "
                    "or invariant-tiles (the same with bf16 linears in AMX's order: faster bf16 prefill on CPUs "
                    "with AMX-BF16, other bits); with a cache, default: the cache's")
        ->check(CLI::IsMember({"torch", "invariant", "invariant-tiles"}))
        ->each([&o](const std::string&) { o.kernelsGiven = true; });
    cmd->add_option("--decode-kernel", o.decodeKernel,
                    "linear (default: transformers' F.linear, its bits) or mv (matrix-vector decode steps: "
                    "faster on CPU, other bits; caches it builds carry that in their model fingerprint)")
        ->check(CLI::IsMember({"linear", "mv"}));
    addThreadsOption(cmd, o.threads);
}

namespace {

CLI::Validator numberAtLeast(double bound, bool inclusive, const std::string& expected) {
    return CLI::Validator(
        [bound, inclusive, expected](std::string& text) -> std::string {
            double value = 0;
            std::size_t used = 0;
            try {
                value = std::stod(text, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            const bool ok = used == text.size() && !text.empty() && (inclusive ? value >= bound : value > bound);
            return ok ? std::string() : "value " + text + ": expected " + expected;
        },
        expected);
}

}  // namespace

const CLI::Validator kPositive = numberAtLeast(0, false, "a number > 0");
const CLI::Validator kNonNegative = numberAtLeast(0, true, "a number >= 0");

const CLI::Validator kModelPath(
    [](const std::string& path) -> std::string {
        std::error_code error;
        if (std::filesystem::is_directory(path, error)) return "";
        if (isGgufPath(path) && std::filesystem::is_regular_file(path, error)) return "";
        return "'" + path + "' is neither a model directory nor a .gguf file";
    },
    "DIR|FILE.gguf");

void takeBuildFromCache(ModelOptions& o, const std::string& cachePath) {
    const SavedCacheBuild build = savedCacheBuild(cachePath);
    if (!o.dtypeGiven) o.dtype = dtypeName(build.dtype);
    if (!o.kernelsGiven) o.kernels = kernelsName(build.kernels);
}

void addDecodeOptions(CLI::App* cmd, DecodeOptions& o) {
    cmd->add_option("--max-new-tokens", o.maxNewTokens, "Stop after this many new tokens")->check(kPositive);
    cmd->add_option("--temperature", o.sampling.temperature, "0 = greedy (default); >0 samples")->check(kNonNegative);
    cmd->add_option("--top-k", o.sampling.topK, "Sample among the k most likely tokens (0 = all)")->check(kNonNegative);
    cmd->add_option("--top-p", o.sampling.topP, "Nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seed", o.sampling.seed, "Seed for sampling; a draw depends only on (seed, position)");
}

nlohmann::ordered_json templateArguments(const std::string& text) {
    nlohmann::ordered_json args;
    try {
        args = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw UsageError("--template-args: not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!args.is_object())
        throw UsageError("--template-args: expected a JSON object, e.g. '{\"enable_thinking\": false}'");
    return args;
}

std::optional<Tokenizer> tokenizerIfPresent(const std::string& dir) {
    if (!isGgufFile(dir) && !std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
        return std::nullopt;
    return Tokenizer::fromModelDir(dir);
}

void printGeneration(const std::vector<int64_t>& promptIds, const GenerationResult& r,
                     const std::optional<Tokenizer>& tok, bool json) {
    const std::string text = tok ? tok->decode(r.ids) : std::string();
    if (json) {
        std::cout << generationToJson(promptIds, r, text).dump() << "\n";
    } else if (tok) {
        std::cout << text << "\n";
    } else {
        for (std::size_t i = 0; i < r.ids.size(); ++i) std::cout << (i ? "," : "") << r.ids[i];
        std::cout << "\n";
    }
}

void applyThreads(int threads) { configureThreads(threads); }

Transformer loadModel(const ModelOptions& o) {
    applyThreads(o.threads);
    LoadReport report;
    Numerics numerics;
    numerics.kernels = parseKernels(o.kernels);
    numerics.matrixVectorDecode = o.decodeKernel == "mv";
    Transformer model = Transformer::load(o.model, parseDtype(o.dtype), parseDevice(o.device), &report, numerics);
    if (!report.unusedTensors.empty())
        std::cerr << "kvscope: warning: " << report.unusedTensors.size() << " tensor(s) in " << o.model
                  << " are not used by the model, e.g. '" << report.unusedTensors.front() << "'\n";
    return model;
}

nlohmann::json stepToJson(const StepRecord& s) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& t : s.top) top.push_back({t.id, t.logit});
    return {{"id", s.id}, {"logprob", s.logprob}, {"margin", s.margin}, {"entropy", s.entropy}, {"top", top}};
}

nlohmann::json generationToJson(const std::vector<int64_t>& promptIds, const GenerationResult& r,
                                const std::string& text) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : r.steps) steps.push_back(stepToJson(s));
    return {{"prompt_ids", promptIds},
            {"generated_ids", r.ids},
            {"text", text},
            {"stop_reason", stopReasonName(r.stopReason)},
            {"steps", steps}};
}

namespace {

nlohmann::json metricsJson(const KvMetrics& m) {
    return {{"max_abs", m.maxAbs}, {"mean_abs", m.meanAbs}, {"rel_l2", m.relL2}, {"differing", m.differing}};
}

}  // namespace

nlohmann::json cacheDiffJson(const CacheDiff& d, bool full) {
    nlohmann::json layers = nlohmann::json::array(), positions = nlohmann::json::array();
    for (const auto& l : d.perLayer)
        layers.push_back(
            {{"layer", l.layer}, {"bit_exact", l.bitExact}, {"k", metricsJson(l.keys)}, {"v", metricsJson(l.values)}});
    for (const auto& p : d.perPosition)
        positions.push_back({{"position", p.position},
                             {"max_abs", p.maxAbs},
                             {"differing", p.differing},
                             {"layers_differing", p.layersDiffering}});
    nlohmann::json j = {
        {"bit_exact", d.bitExact},
        {"first_difference", d.firstDifference ? nlohmann::json{{"layer", d.firstDifference->first},
                                                                {"position", d.firstDifference->second}}
                                               : nlohmann::json(nullptr)},
        {"shape", {{"layers", d.layers}, {"kv_heads", d.heads}, {"positions", d.positions}, {"head_dim", d.headDim}}},
        {"layers", layers},
        {"positions", positions},
        {"seconds", d.seconds}};
    if (full)  // [layer][head][position] grids
        j["grids"] = {{"k",
                       {{"max_abs", d.keys.maxAbs},
                        {"mean_abs", d.keys.meanAbs},
                        {"rel_l2", d.keys.relL2},
                        {"differing", d.keys.differing}}},
                      {"v",
                       {{"max_abs", d.values.maxAbs},
                        {"mean_abs", d.values.meanAbs},
                        {"rel_l2", d.values.relL2},
                        {"differing", d.values.differing}}}};
    return j;
}

nlohmann::json locatorOpsJson(const LocatorReport& r) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& op : r.ops)
        ops.push_back({{"layer", op.layer},
                       {"op", op.op},
                       {"bit_exact", op.bitExact},
                       {"max_abs", op.maxAbs},
                       {"differing", op.differing},
                       {"elements", op.elements}});
    return ops;
}

nlohmann::json firstDifferenceJson(const LocatorReport& r) {
    return r.firstDifference ? locatorOpsJson(r)[*r.firstDifference] : nlohmann::json(nullptr);
}

std::string firstDifferenceLine(const LocatorReport& r) {
    if (!r.firstDifference) return "every op is bit-identical";
    const OpComparison& op = r.ops[*r.firstDifference];
    std::ostringstream line;
    line << "first differing op: layer " << op.layer << " " << op.op << " (max |diff| " << op.maxAbs << ", "
         << op.differing << " of " << op.elements << " elements)";
    return line.str();
}

void printCacheDiff(const CacheDiff& d) {
    std::printf("bit-exact: %s\n", d.bitExact ? "yes" : "no");
    if (d.firstDifference)
        std::printf("first difference: layer %lld, position %lld\n", static_cast<long long>(d.firstDifference->first),
                    static_cast<long long>(d.firstDifference->second));
    std::printf("%5s %12s %12s %12s %12s %10s %10s\n", "layer", "K max|d|", "V max|d|", "K rel L2", "V rel L2",
                "K diff", "V diff");
    for (const auto& l : d.perLayer)
        std::printf("%5lld %12.4g %12.4g %12.4g %12.4g %10lld %10lld\n", static_cast<long long>(l.layer), l.keys.maxAbs,
                    l.values.maxAbs, l.keys.relL2, l.values.relL2, static_cast<long long>(l.keys.differing),
                    static_cast<long long>(l.values.differing));
    std::printf("diff computed in %.3f s\n", d.seconds);
}

}  // namespace kvscope::cli
