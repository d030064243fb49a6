// SPDX-License-Identifier: MIT
// kvscope bench: throughput figures, printed; never a test.
#include "cli_common.h"

#include "core/bench/benchmark.h"
#include "core/util/huge_pages.h"
#include "core/util/resources.h"
#include "core/util/version.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

namespace kvscope::cli {
namespace {

// A kernel row's rate over one of its compute lines (KernelRow's peakFlopsPerSecond or
// adjacentPeakFlopsPerSecond), or JSON null where none applies (0).
nlohmann::json fractionOf(const KernelRow& k, double line) {
    return line > 0 ? nlohmann::json(k.flopsPerSecond / line) : nlohmann::json(nullptr);
}

// The same as a table cell, "-" where none applies.
std::string percentOf(const KernelRow& k, double line) {
    if (line <= 0) return "-";
    char cell[16];
    std::snprintf(cell, sizeof cell, "%.0f%%", 100.0 * k.flopsPerSecond / line);
    return cell;
}

// An empty string as JSON null (a path or name that does not apply, or that this build cannot tell).
nlohmann::json orNull(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

// A figure that is 0 where it does not apply, as JSON null there.
nlohmann::json positiveOrNull(double value) { return value > 0 ? nlohmann::json(value) : nlohmann::json(nullptr); }

std::vector<double> milliseconds(const std::vector<double>& seconds) {
    std::vector<double> out;
    for (const double s : seconds) out.push_back(1e3 * s);
    return out;
}

// Divided as the single figures are (x / 1e9), so that a median of these is one of them exactly.
std::vector<double> gigas(const std::vector<double>& perSecond) {
    std::vector<double> out;
    for (const double x : perSecond) out.push_back(x / 1e9);
    return out;
}

// The run's date (UTC), which names the measurement file it is kept as (docs/measurements/bench/).
std::string todayUtc() {
    const std::time_t now = std::time(nullptr);
    char day[16];
    std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&now));
    return day;
}

nlohmann::json reportToJson(const BenchReport& r) {
    nlohmann::json rows = nlohmann::json::array(), kernelRows = nlohmann::json::array();
    for (const auto& row : r.rows)
        rows.push_back(
            {{"dtype", row.dtype},
             {"kernels", row.kernels},
             {"prefill_tokens_per_s", row.prefillTokensPerSecond},
             {"prefill_trial_ms", milliseconds(row.prefillTrialSeconds)},
             {"prefill_of_torch_in_turn",
              row.prefillInTurnOfTorch.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.prefillOfTorchInTurn)},
             {"prefill_in_turn_of_torch", row.prefillInTurnOfTorch},
             {"prefill_in_turn_ms", milliseconds(row.prefillInTurnSeconds)},
             {"prefill_linears_at_compute_line_ms", positiveOrNull(1e3 * row.prefillLinearsAtComputeLineSeconds)},
             {"prefill_ceiling_of_torch_in_turn", positiveOrNull(row.prefillCeilingOfTorchInTurn)},
             {"prefill_compute_line_gflop_per_s", positiveOrNull(row.prefillComputeLineFlopsPerSecond / 1e9)},
             {"prefill_in_turn_compute_line_gflop_per_s", gigas(row.prefillInTurnLineFlopsPerSecond)},
             {"decode_tokens_per_s", row.decodeTokensPerSecond},
             {"decode_mean_tokens_per_s", row.decodeMeanTokensPerSecond},
             {"decode_mv_tokens_per_s", row.decodeMatrixVectorTokensPerSecond},
             {"rebuild_tokens_per_s", row.rebuildTokensPerSecond},
             {"prefill_over_rebuild", row.prefillTokensPerSecond / row.rebuildTokensPerSecond},
             {"weight_bytes_per_token", row.weightBytesPerToken},
             {"weight_bytes_on_huge_pages",
              row.weightBytesOnHugePages >= 0 ? nlohmann::json(row.weightBytesOnHugePages) : nlohmann::json(nullptr)},
             {"bandwidth_bound_tokens_per_s", row.boundTokensPerSecond},
             {"decode_fraction_of_bound", row.decodeTokensPerSecond / row.boundTokensPerSecond},
             {"decode_step_ms", 1e3 * row.decodeStepSeconds()},
             {"decode_run_step_ms", milliseconds(row.decodeRunStepSeconds)},
             {"decode_linears_ms", 1e3 * row.decodeLinearsSecondsPerStep},
             {"decode_rest_ms", 1e3 * row.decodeRestSecondsPerStep},
             {"decode_linears_gb_per_s", row.decodeLinearsBytesPerSecond() / 1e9},
             {"decode_adjacent_read_gb_per_s", row.adjacentReadBytesPerSecond / 1e9},
             {"decode_fraction_of_adjacent_reads", row.decodeFractionOfAdjacentReads}});
    for (const auto& k : r.kernelRows) {
        kernelRows.push_back({{"dtype", k.dtype},
                              {"kernels", k.kernels},
                              {"shape", k.shape},
                              {"rows", k.rows},
                              {"path", orNull(k.path)},
                              {"in", k.in},
                              {"out", k.out},
                              {"seconds", k.seconds},
                              {"weight_gb_per_s", k.weightBytesPerSecond / 1e9},
                              {"gflop_per_s", k.flopsPerSecond / 1e9},
                              {"fraction_of_peak", fractionOf(k, k.peakFlopsPerSecond)},
                              {"adjacent_peak_gflop_per_s", positiveOrNull(k.adjacentPeakFlopsPerSecond / 1e9)},
                              {"fraction_of_adjacent_peak", fractionOf(k, k.adjacentPeakFlopsPerSecond)}});
    }
    return {{"date", todayUtc()},
            {"kvscope", kvscopeVersion()},
            {"cpu_model", cpuModelName()},
            {"model", r.modelDir},
            {"threads", r.threads},
            {"libtorch", r.libtorch},
            {"cpu_features", r.cpuFeatures},
            {"invariant_kernel_path", r.kernelPath},
            {"invariant_prefill_pair_path", r.prefillPairPath},
            {"invariant_decode_fetch_bytes",
             r.decodeFetchBytes >= 0 ? nlohmann::json(r.decodeFetchBytes) : nlohmann::json(nullptr)},
            {"torch_onednn_isa", orNull(r.torchOneDnn.name)},
            {"torch_onednn_isa_cap", orNull(r.torchOneDnn.cap)},
            {"torch_openblas_core", orNull(r.torchOpenBlas.name)},
            {"read_bandwidth_gb_per_s", r.readBandwidthBytesPerSecond / 1e9},
            {"triad_bandwidth_gb_per_s", r.triadBandwidthBytesPerSecond / 1e9},
            {"bound_bandwidth_gb_per_s", r.boundBandwidthBytesPerSecond / 1e9},
            {"bandwidth_passes", r.bandwidthPasses},
            {"read_bandwidth_median_gb_per_s", r.readBandwidthMedianBytesPerSecond / 1e9},
            {"bandwidth_array_mib", static_cast<double>(r.bandwidthArrayBytes >> 20)},
            {"transparent_hugepages", r.transparentHugePages},
            {"last_level_cache_mib", static_cast<double>(r.lastLevelCacheBytes) / (1 << 20)},
            {"peak_pair_order_gflop_per_s", r.pairFlopsPerSecond / 1e9},
            {"peak_lane_order_gflop_per_s", r.laneFlopsPerSecond / 1e9},
            {"rows", rows},
            {"kernel_rows", kernelRows}};
}

// Where torch kernels' bf16 products run: the bf16 prefill ratio means another thing against AMX.
std::string oneDnnLine(const OneDnnIsa& isa) {
    const std::string cap = isa.cap.empty() ? "ONEDNN_MAX_CPU_ISA unset" : "capped by ONEDNN_MAX_CPU_ISA=" + isa.cap;
    if (isa.name.empty()) return "inside libtorch, its instruction set not exposed (" + cap + ")";
    return isa.name + " (" + isa.library + "; " + cap + ")";
}

// Each row's prefill against torch kernels' timed in turn (BenchRow::prefillInTurnOfTorch).
void printPrefillsInTurn(const BenchReport& r) {
    bool any = false;
    for (const auto& row : r.rows) {
        if (row.prefillInTurnOfTorch.empty()) continue;
        if (!any)
            std::printf("\nprefill of torch kernels', the two timed in turn (%d rounds; median, then each round):\n",
                        kPrefillRoundsInTurn);
        any = true;
        std::string rounds;
        for (const double ratio : row.prefillInTurnOfTorch) {
            char figure[24];
            std::snprintf(figure, sizeof figure, "%s%.1f%%", rounds.empty() ? "" : " ", 100.0 * ratio);
            rounds += figure;
        }
        std::printf("  %-5s %-15s %6.1f%%  (%s)", row.dtype.c_str(), row.kernels.c_str(),
                    100.0 * row.prefillOfTorchInTurn, rounds.c_str());
        if (row.prefillCeilingOfTorchInTurn > 0)
            std::printf(
                "; at most %.1f%%: its linears' multiply-adds alone take %.0f ms at the compute line around the "
                "rounds (median %.1f GFLOP/s)",
                100.0 * row.prefillCeilingOfTorchInTurn, 1e3 * row.prefillLinearsAtComputeLineSeconds,
                row.prefillComputeLineFlopsPerSecond / 1e9);
        std::printf("\n");
    }
}

// What torch kernels' fp32 products run on where OpenBLAS does them, with a hint where it fell back
// to SSE kernels on a CPU it does not know; nothing where no OpenBLAS is loaded.
void printOpenBlasLine(const OpenBlasCore& core) {
    if (core.name.empty()) return;
    std::printf("torch kernels' fp32 products: OpenBLAS %s", core.name.c_str());
    if (core.sseOnly && !core.faster.empty())
        std::printf(" (SSE kernels: this OpenBLAS does not know this CPU; OPENBLAS_CORETYPE=%s runs its %s ones)",
                    core.faster.c_str(), core.fasterIsa.c_str());
    std::printf("\n");
}

// How a decode row's weights are fetched on the AVX-512 paths (kernels::decodeFetchBytes).
std::string decodeFetchText(int64_t bytes) {
    if (bytes < 0) return "";
    if (bytes == 0) return "; decode weights: the hardware prefetcher alone";
    return "; decode weights fetched " + std::to_string(bytes) + " bytes ahead into L2";
}

// What ran where: the libraries' and kernels' paths, the memory's bandwidth and the compute line.
void printMachine(const BenchReport& r) {
    const std::string prefillPath =
        r.prefillPairPath == r.kernelPath ? "" : "; a bf16 prefill's linears: " + r.prefillPairPath + " path (FMAs)";
    std::printf("model: %s\nlibtorch: %s\ncpu: %s\ntorch kernels' bf16 products: oneDNN %s\n", r.modelDir.c_str(),
                r.libtorch.c_str(), r.cpuFeatures.c_str(), oneDnnLine(r.torchOneDnn).c_str());
    printOpenBlasLine(r.torchOpenBlas);
    std::printf("invariant kernels: %s path%s%s\nthreads: %d\n", r.kernelPath.c_str(), prefillPath.c_str(),
                decodeFetchText(r.decodeFetchBytes).c_str(), r.threads);
    const int triadPasses = kFirstBandwidthPasses + kLaterBandwidthPasses * static_cast<int>(r.rows.size() + 1);
    std::printf(
        "bandwidth: read %.1f GB/s (vectorised, %d threads, 1, 2 or 4 streams a thread, best of %d passes: %d first, "
        "%d before each row and at the end, and around every %lld decode steps; the median pass %.1f), triad %.1f "
        "GB/s (best of the %d passes first, before each row and at the end); bound: %.1f GB/s\n",
        r.readBandwidthBytesPerSecond / 1e9, r.threads, r.bandwidthPasses, kFirstBandwidthPasses, kLaterBandwidthPasses,
        static_cast<long long>(kDecodeStepsBetweenReads), r.readBandwidthMedianBytesPerSecond / 1e9,
        r.triadBandwidthBytesPerSecond / 1e9, triadPasses, r.boundBandwidthBytesPerSecond / 1e9);
    std::printf(
        "bandwidth arrays: %zu MiB each (STREAM's rule: 4x the last-level cache, %s; 256 MiB to 1/8 of memory)\n",
        r.bandwidthArrayBytes >> 20,
        r.lastLevelCacheBytes > 0 ? (std::to_string(r.lastLevelCacheBytes >> 20) + " MiB here").c_str()
                                  : "unknown here");
    std::printf("pages: %s\n", hugePagesSummary(r.transparentHugePages).c_str());
    std::printf(
        "compute: pair order %.1f GFLOP/s, 16-lane order %.1f GFLOP/s (the invariant kernels' multiply-adds from "
        "registers, %d threads, best of 3)\n\n",
        r.pairFlopsPerSecond / 1e9, r.laneFlopsPerSecond / 1e9, r.threads);
}

// Each dtype and kernel choice: prefill, decode and rebuild, against the bound.
void printThroughputTable(const BenchReport& r) {
    std::printf("%-5s %-15s %12s %12s %10s %12s %9s %10s %12s %9s\n", "dtype", "kernels", "prefill t/s", "decode t/s",
                "decode mv", "rebuild t/s", "pf/rebld", "weights", "bound t/s", "of bound");
    for (const auto& row : r.rows) {
        char mv[32] = "-";  // measured for torch kernels only
        if (row.decodeMatrixVectorTokensPerSecond > 0)
            std::snprintf(mv, sizeof mv, "%.2f", row.decodeMatrixVectorTokensPerSecond);
        std::printf("%-5s %-15s %12.1f %12.2f %10s %12.2f %8.1fx %7.0f MB %12.2f %8.0f%%\n", row.dtype.c_str(),
                    row.kernels.c_str(), row.prefillTokensPerSecond, row.decodeTokensPerSecond, mv,
                    row.rebuildTokensPerSecond, row.prefillTokensPerSecond / row.rebuildTokensPerSecond,
                    row.weightBytesPerToken / 1e6, row.boundTokensPerSecond,
                    100.0 * row.decodeTokensPerSecond / row.boundTokensPerSecond);
    }
    std::printf(
        "\ndecode: greedy steps after the prefill, in runs of %lld between read passes of the bound, the median\n"
        "run's steps over their time alone (every run's: mean ms below). decode mv: the same with torch kernels\n"
        "and --decode-kernel mv. rebuild: the prompt's first ids fed one forward per token (how audit and bridge\n"
        "rebuild torch-kernel trajectories); pf/rebld = prefill over it.\n",
        static_cast<long long>(kDecodeStepsBetweenReads));
    printPrefillsInTurn(r);
    std::string onHugePages;  // one figure per dtype: its kernel rows share the loaded weights
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
        const BenchRow& row = r.rows[i];
        if (i > 0 && r.rows[i - 1].dtype == row.dtype) continue;
        onHugePages += (onHugePages.empty() ? "" : ", ") + row.dtype + " " +
                       (row.weightBytesOnHugePages < 0 ? std::string("unknown")
                                                       : std::to_string(row.weightBytesOnHugePages / 1000000) + " MB") +
                       " (weights " + std::to_string(static_cast<int64_t>(row.weightBytesPerToken / 1e6)) + " MB)";
    }
    std::printf("memory on 2 MiB pages grown by loading the model: %s.\n", onHugePages.c_str());
}

// A decode step split into its linears and the rest, against the read passes around it.
void printStepTable(const BenchReport& r) {
    std::printf("\n%-5s %-15s %10s %10s %12s %12s %10s %14s %13s\n", "dtype", "kernels", "step ms", "mean ms",
                "linears ms", "linears GB/s", "rest ms", "adj. read GB/s", "of adj. read");
    for (const auto& row : r.rows) {
        std::printf("%-5s %-15s %10.2f %10.2f %12.2f %12.1f %10.2f %14.1f %12.0f%%\n", row.dtype.c_str(),
                    row.kernels.c_str(), 1e3 * row.decodeStepSeconds(), 1e3 / row.decodeMeanTokensPerSecond,
                    1e3 * row.decodeLinearsSecondsPerStep, row.decodeLinearsBytesPerSecond() / 1e9,
                    1e3 * row.decodeRestSecondsPerStep, row.adjacentReadBytesPerSecond / 1e9,
                    100.0 * row.decodeFractionOfAdjacentReads);
    }
    std::printf(
        "A decode step (the median run's, as above; mean ms: every run's steps over their time, stalls of the\n"
        "VM's host included): its linear layers timed alone (the step's calls in its order, weights from\n"
        "memory), and the rest (norms, RoPE, attention, cache writes, sampling, the threads' hand-offs): a step\n"
        "less its linears timed right after it, both the median over up to %lld such pairs.\n"
        "adj. read: the read passes before and after each run of %lld decode steps, the larger; of adj. read: the\n"
        "run's weight stream against it (both the median over the runs): how close decode comes to what the\n"
        "memory gave while it ran.\n",
        static_cast<long long>(kStepLinearsPairs), static_cast<long long>(kDecodeStepsBetweenReads));
}

// Each linear shape alone (skipped with --no-kernel-figures).
void printKernelTable(const BenchReport& r) {
    if (r.kernelRows.empty()) return;
    std::printf("\n%-5s %-15s %-10s %-10s %5s %7s %7s %10s %10s %10s %8s %8s\n", "dtype", "kernels", "path", "linear",
                "rows", "in", "out", "ms", "GB/s", "GFLOP/s", "of peak", "of adj.");
    for (const auto& k : r.kernelRows) {
        std::printf("%-5s %-15s %-10s %-10s %5lld %7lld %7lld %10.3f %10.1f %10.1f %8s %8s\n", k.dtype.c_str(),
                    k.kernels.c_str(), k.path.empty() ? "-" : k.path.c_str(), k.shape.c_str(),
                    static_cast<long long>(k.rows), static_cast<long long>(k.in), static_cast<long long>(k.out),
                    k.seconds * 1e3, k.weightBytesPerSecond / 1e9, k.flopsPerSecond / 1e9,
                    percentOf(k, k.peakFlopsPerSecond).c_str(), percentOf(k, k.adjacentPeakFlopsPerSecond).c_str());
    }
    std::printf(
        "GB/s: weight bytes read per second (what bounds rows = 1; timed calls repeat, so a layer's weights come\n"
        "from the caches, and the lm_head's too where the last-level cache holds them); GFLOP/s: what bounds a\n"
        "prefill; of peak: against the compute line above, in the order the row's path takes (not for\n"
        "invariant-tiles' bf16 rows: AMX's rate is not measured); of adj.: against that line's passes right\n"
        "before and after the row's calls, the larger (the VM's rate moves within minutes).\n");
}

void printReport(const BenchReport& r) {
    printMachine(r);
    printThroughputTable(r);
    printStepTable(r);
    printKernelTable(r);
}

}  // namespace

void addBenchCommand(CLI::App& app) {
    struct Options {
        BenchOptions bench;
        std::vector<std::string> dtypes = {"fp32", "bf16"};
        std::vector<std::string> kernels = {"torch", "invariant"};
        std::string device = "cpu";
        int threads = 0;
        bool json = false, noKernelFigures = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("bench", "Prefill/decode/rebuild throughput vs the memory-bandwidth bound");
    cmd->add_option("--model", o->bench.modelDir, "Model directory (default: a generated Qwen2.5-0.5B-shaped model)");
    cmd->add_option("--cache-dir", o->bench.cacheDir, "Where the generated model is kept (default: ~/.cache/kvscope)");
    cmd->add_option("--prompt-tokens", o->bench.promptTokens, "Prefill length")->check(kPositive);
    cmd->add_option("--decode-tokens", o->bench.decodeTokens, "Timed decode steps")->check(kPositive);
    cmd->add_option("--rebuild-tokens", o->bench.rebuildTokens, "Ids rebuilt token by token (timed)")->check(kPositive);
    cmd->add_option("--dtypes", o->dtypes, "Dtypes to measure")
        ->delimiter(',')
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
    cmd->add_option("--kernels", o->kernels, "Kernel choices to measure, same weights (default: torch,invariant)")
        ->delimiter(',')
        ->check(CLI::IsMember({"torch", "invariant", "invariant-tiles"}));
    cmd->add_flag("--no-kernel-figures", o->noKernelFigures, "Skip the per-shape linear table");
    cmd->add_option("--device", o->device, "cpu, cuda or cuda:N");
    addThreadsOption(cmd, o->threads);
    cmd->add_flag("--json", o->json, "Print the figures as JSON");
    cmd->callback([o] {
        applyThreads(o->threads);
        if (o->bench.cacheDir.empty()) o->bench.cacheDir = userCacheDir();
        o->bench.dtypes.clear();
        for (const auto& d : o->dtypes) o->bench.dtypes.push_back(parseDtype(d));
        o->bench.kernels.clear();
        for (const auto& k : o->kernels) o->bench.kernels.push_back(parseKernels(k));
        o->bench.kernelFigures = !o->noKernelFigures;
        o->bench.device = parseDevice(o->device);
        const auto report =
            runBenchmark(o->bench, [](const std::string& msg) { std::cerr << "bench: " << msg << "\n"; });
        if (o->json)
            std::cout << reportToJson(report).dump(2) << "\n";
        else
            printReport(report);
    });
}

}  // namespace kvscope::cli
