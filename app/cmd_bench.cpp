// SPDX-License-Identifier: MIT
// kvscope bench: throughput figures, printed; never a test.
#include "cli_common.h"

#include "core/bench/benchmark.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace kvscope::cli {
namespace {

std::string defaultCacheDir() {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kvscope";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kvscope";
    return "/tmp/kvscope-cache";
}

void printReport(const BenchReport& r, bool json) {
    if (json) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& row : r.rows)
            rows.push_back({{"dtype", row.dtype},
                            {"prefill_tokens_per_s", row.prefillTokensPerSecond},
                            {"decode_tokens_per_s", row.decodeTokensPerSecond},
                            {"decode_mv_tokens_per_s", row.decodeMatrixVectorTokensPerSecond},
                            {"weight_bytes_per_token", row.weightBytesPerToken},
                            {"bandwidth_bound_tokens_per_s", row.boundTokensPerSecond},
                            {"decode_fraction_of_bound", row.decodeTokensPerSecond / row.boundTokensPerSecond}});
        std::cout << nlohmann::json{{"model", r.modelDir},
                                    {"threads", r.threads},
                                    {"libtorch", r.libtorch},
                                    {"cpu_features", r.cpuFeatures},
                                    {"triad_bandwidth_gb_per_s", r.bandwidthBytesPerSecond / 1e9},
                                    {"rows", rows}}
                         .dump(2)
                  << "\n";
        return;
    }
    std::printf("model: %s\nlibtorch: %s\ncpu: %s\nthreads: %d\ntriad bandwidth: %.1f GB/s\n\n", r.modelDir.c_str(),
                r.libtorch.c_str(), r.cpuFeatures.c_str(), r.threads, r.bandwidthBytesPerSecond / 1e9);
    std::printf("%-6s %16s %15s %15s %14s %16s %10s\n", "dtype", "prefill tok/s", "decode tok/s", "decode mv",
                "weights/token", "bound tok/s", "of bound");
    for (const auto& row : r.rows)
        std::printf("%-6s %16.1f %15.2f %15.2f %11.0f MB %16.2f %9.0f%%\n", row.dtype.c_str(),
                    row.prefillTokensPerSecond, row.decodeTokensPerSecond, row.decodeMatrixVectorTokensPerSecond,
                    row.weightBytesPerToken / 1e6, row.boundTokensPerSecond,
                    100.0 * row.decodeTokensPerSecond / row.boundTokensPerSecond);
    std::printf("\ndecode: transformers' F.linear kernels (the default); decode mv: --decode-kernel mv, same run\n");
}

}  // namespace

void addBenchCommand(CLI::App& app) {
    struct Options {
        BenchOptions bench;
        std::vector<std::string> dtypes = {"fp32", "bf16"};
        std::string device = "cpu";
        int threads = 0;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("bench", "Prefill/decode throughput vs the memory-bandwidth bound");
    cmd->add_option("--model", o->bench.modelDir, "Model directory (default: a generated Qwen2.5-0.5B-shaped model)");
    cmd->add_option("--cache-dir", o->bench.cacheDir, "Where the generated model is kept (default: ~/.cache/kvscope)");
    cmd->add_option("--prompt-tokens", o->bench.promptTokens, "Prefill length")->check(kPositive);
    cmd->add_option("--decode-tokens", o->bench.decodeTokens, "Timed decode steps")->check(kPositive);
    cmd->add_option("--dtypes", o->dtypes, "Dtypes to measure")->delimiter(',');
    cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
    addThreadsOption(cmd, o->threads);
    cmd->add_flag("--json", o->json, "Print the figures as JSON");
    cmd->callback([o] {
        applyThreads(o->threads);
        if (o->bench.cacheDir.empty()) o->bench.cacheDir = defaultCacheDir();
        o->bench.dtypes.clear();
        for (const auto& d : o->dtypes) o->bench.dtypes.push_back(parseDtype(d));
        o->bench.device = parseDevice(o->device);
        const auto report =
            runBenchmark(o->bench, [](const std::string& msg) { std::cerr << "bench: " << msg << "\n"; });
        printReport(report, o->json);
    });
}

}  // namespace kvscope::cli
