// SPDX-License-Identifier: MIT
// End to end through the real `kvscope` executable.
#include "core/bench/benchmark.h"
#include "core/kernels/invariant.h"
#include "core/util/huge_pages.h"
#include "core/util/version.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

namespace kvscope {
namespace {

using test::runCli;
using test::shellQuote;

std::string model(const std::string& variant = "qwen2") { return shellQuote(test::tinyModel(variant)); }

// The shortest bench that reports the machine: one fp32 invariant row, no kernel table.
std::string shortBench() {
    return "bench --model " + model() +
           " --prompt-tokens 4 --decode-tokens 1 --rebuild-tokens 1 --dtypes fp32 --kernels invariant "
           "--no-kernel-figures";
}

// The middle of an odd number of values: their median, as the bench computes it.
double middleOf(std::vector<double> values) {
    EXPECT_EQ(values.size() % 2, 1u) << "an even count has no middle value";
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

void expectOneLineError(const test::CommandResult& r, const std::string& fragment) {
    EXPECT_NE(r.exitCode, 0);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
}

TEST(Cli, VersionNamesKvscopeLibtorchAndDevice) {
    auto r = runCli("--version");
    EXPECT_EQ(r.exitCode, 0);
    EXPECT_NE(r.out.find("kvscope 0."), std::string::npos);
    // The executable links the same libtorch as this test: its version and the very file loaded.
    EXPECT_NE(r.out.find("libtorch " + libtorchVersion() + " (" + libtorchLibraryPath() + ")"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("cpu"), std::string::npos);
}

TEST(Cli, HelpExistsForEveryCommand) {
    for (const char* cmd : {"generate", "logits", "tokenize", "detokenize", "make-test-model", "bench"}) {
        auto r = runCli(std::string(cmd) + " --help");
        EXPECT_EQ(r.exitCode, 0) << cmd;
        EXPECT_NE(r.out.find("--"), std::string::npos) << cmd;
    }
}

TEST(Cli, BenchSizesItsBandwidthArraysByStreamsRule) {
    constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;
    EXPECT_EQ(streamArrayBytes(480 * MiB, 24 * GiB), 1920 * MiB);  // 4x the cache
    EXPECT_EQ(streamArrayBytes(32 * MiB, 24 * GiB), 256 * MiB);    // never below 256 MiB
    EXPECT_EQ(streamArrayBytes(0, 24 * GiB), 256 * MiB);           // cache unknown
    EXPECT_EQ(streamArrayBytes(480 * MiB, 8 * GiB), 1 * GiB);      // an eighth of the memory at most
    // The cache sysfs reports, if any, is read in bytes (sizes there are "32K", "2048K", "480M"...).
    const std::size_t cache = lastLevelCacheBytes();
    if (cache > 0) {
        EXPECT_EQ(cache % 1024, 0u) << cache;
        EXPECT_GE(cache, 64 * 1024u) << cache;
    }
}

TEST(Cli, BenchJsonHasEveryDtypeAndKernelsRowAndTheKernelTable) {
    // The figures are not checked (a benchmark, not a timed test): the keys, the rows, that a prompt
    // shorter than the old fixed 16-token warm-up runs, and that --threads 1 is what it reports.
    auto r = runCli("bench --model " + model() +
                    " --prompt-tokens 5 --decode-tokens 10 --rebuild-tokens 3 --threads 1 --json");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["threads"], 1);
    // What names its measurement file (docs/measurements/bench/DATE-CPU.json) and its table's CPU kind.
    EXPECT_EQ(j["cpu_model"], cpuModelName());
    EXPECT_EQ(j["kvscope"], kvscopeVersion());
    EXPECT_TRUE(j["date"].is_string() && j["date"].get<std::string>().size() == 10) << j["date"];
    for (const char* key : {"read_bandwidth_gb_per_s", "triad_bandwidth_gb_per_s", "bound_bandwidth_gb_per_s",
                            "peak_pair_order_gflop_per_s", "peak_lane_order_gflop_per_s"})
        EXPECT_GT(j[key].get<double>(), 0.0) << key;
    EXPECT_EQ(j["bound_bandwidth_gb_per_s"].get<double>(),
              std::max(j["read_bandwidth_gb_per_s"].get<double>(), j["triad_bandwidth_gb_per_s"].get<double>()));
    EXPECT_EQ(j["bandwidth_array_mib"].get<double>(),
              static_cast<double>(streamArrayBytes(lastLevelCacheBytes(), physicalMemoryBytes()) >> 20));
    EXPECT_EQ(j["last_level_cache_mib"].get<double>(), static_cast<double>(lastLevelCacheBytes()) / (1 << 20));
    EXPECT_EQ(j["transparent_hugepages"], transparentHugePagesMode());
    ASSERT_EQ(j["rows"].size(), 4u);  // fp32, bf16 x torch, invariant
    // Probed first, before each row and at the end, and read around each row's runs of decode steps
    // (10 steps: runs of 4, 4 and 2, a pass before each and after the last), and the torch rows' decode
    // mv runs: the bound covers the time every timed decode step ran in.
    static_assert(kDecodeStepsBetweenReads == 4, "the runs below are of 4 steps");
    const std::vector<double> stepsInRun = {4, 4, 2};
    const auto decodeRuns = static_cast<int64_t>(stepsInRun.size());
    EXPECT_EQ(j["bandwidth_passes"], kFirstBandwidthPasses + 5 * kLaterBandwidthPasses + (4 + 2) * (decodeRuns + 1));
    EXPECT_GT(j["read_bandwidth_median_gb_per_s"].get<double>(), 0.0);
    EXPECT_LE(j["read_bandwidth_median_gb_per_s"].get<double>(), j["read_bandwidth_gb_per_s"].get<double>());
    for (const auto& row : j["rows"]) {
        // The tiny model's weights may fit pages the process had on 2 MiB already: a count, not a size.
        const auto& onHugePages = row["weight_bytes_on_huge_pages"];
        EXPECT_TRUE(onHugePages.is_null() ? hugePageBytesInUse() < 0 : onHugePages.get<int64_t>() >= 0) << row.dump();
        // Every row against the run's final bound, not the one known when it was measured.
        EXPECT_NEAR(row["bandwidth_bound_tokens_per_s"].get<double>(),
                    j["bound_bandwidth_gb_per_s"].get<double>() * 1e9 / row["weight_bytes_per_token"].get<double>(),
                    1e-9 * row["bandwidth_bound_tokens_per_s"].get<double>())
            << row.dump();
        for (const char* key :
             {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_mean_tokens_per_s", "rebuild_tokens_per_s",
              "bandwidth_bound_tokens_per_s", "decode_fraction_of_bound", "prefill_over_rebuild", "decode_step_ms",
              "decode_linears_ms", "decode_linears_gb_per_s", "decode_adjacent_read_gb_per_s",
              "decode_fraction_of_adjacent_reads"})
            EXPECT_GT(row[key].get<double>(), 0.0) << key << " " << row.dump();
        // The prefill: the median of its timed trials.
        const auto trials = row["prefill_trial_ms"].get<std::vector<double>>();
        ASSERT_EQ(trials.size(), static_cast<std::size_t>(kPrefillTrials)) << row.dump();
        EXPECT_NEAR(row["prefill_tokens_per_s"].get<double>(), 5 / (middleOf(trials) / 1e3),
                    1e-9 * row["prefill_tokens_per_s"].get<double>())
            << row.dump();
        // Each run's time over its steps. The row's step: the median run's (a run the VM's host stalled
        // does not count); its mean rate: every run's steps over their time.
        const auto runStepMs = row["decode_run_step_ms"].get<std::vector<double>>();
        ASSERT_EQ(runStepMs.size(), stepsInRun.size()) << row.dump();
        const double medianRunMs = middleOf(runStepMs);
        EXPECT_NEAR(row["decode_step_ms"].get<double>(), medianRunMs, 1e-9 * medianRunMs) << row.dump();
        EXPECT_NEAR(row["decode_tokens_per_s"].get<double>(), 1e3 / medianRunMs, 1e-9 * 1e3 / medianRunMs)
            << row.dump();
        double runsMs = 0;
        for (std::size_t run = 0; run < runStepMs.size(); ++run) runsMs += runStepMs[run] * stepsInRun[run];
        EXPECT_NEAR(row["decode_mean_tokens_per_s"].get<double>(), 10 / (runsMs / 1e3), 1e-9 * 10 / (runsMs / 1e3))
            << row.dump();
        EXPECT_NEAR(row["decode_fraction_of_bound"].get<double>(),
                    row["decode_tokens_per_s"].get<double>() / row["bandwidth_bound_tokens_per_s"].get<double>(),
                    1e-9 * row["decode_fraction_of_bound"].get<double>())
            << row.dump();
        // A step less its linears, timed in pairs: a time, below 0 only by noise.
        EXPECT_TRUE(row["decode_rest_ms"].is_number()) << row.dump();
        // The passes around the decode runs count towards the run's best read.
        EXPECT_LE(row["decode_adjacent_read_gb_per_s"].get<double>(), j["read_bandwidth_gb_per_s"].get<double>())
            << row.dump();
        EXPECT_EQ(row["decode_mv_tokens_per_s"].get<double>() > 0, row["kernels"] == "torch") << row.dump();
        // Every row's prefill timed in turn with the others of its dtype, each round.
        ASSERT_EQ(row["prefill_in_turn_ms"].size(), static_cast<std::size_t>(kPrefillRoundsInTurn)) << row.dump();
        for (const auto& ms : row["prefill_in_turn_ms"]) EXPECT_GT(ms.get<double>(), 0.0) << row.dump();
    }
    // Against torch kernels' prefill of its dtype in each round: torch's time over the row's, and the
    // median of those; nothing for the torch row itself.
    for (const auto& row : j["rows"]) {
        const std::vector<double> inTurn = row["prefill_in_turn_of_torch"].get<std::vector<double>>();
        if (row["kernels"] == "torch") {
            EXPECT_TRUE(inTurn.empty()) << row.dump();
            EXPECT_TRUE(row["prefill_of_torch_in_turn"].is_null()) << row.dump();
            EXPECT_TRUE(row["prefill_linears_at_compute_line_ms"].is_null()) << row.dump();
            EXPECT_TRUE(row["prefill_ceiling_of_torch_in_turn"].is_null()) << row.dump();
            EXPECT_TRUE(row["prefill_compute_line_gflop_per_s"].is_null()) << row.dump();
            EXPECT_TRUE(row["prefill_in_turn_compute_line_gflop_per_s"].empty()) << row.dump();
            continue;
        }
        const auto torchRow = std::find_if(j["rows"].begin(), j["rows"].end(), [&](const auto& other) {
            return other["dtype"] == row["dtype"] && other["kernels"] == "torch";
        });
        ASSERT_NE(torchRow, j["rows"].end()) << row.dump();
        ASSERT_EQ(inTurn.size(), static_cast<std::size_t>(kPrefillRoundsInTurn)) << row.dump();
        const auto torchMs = (*torchRow)["prefill_in_turn_ms"].get<std::vector<double>>();
        const auto rowMs = row["prefill_in_turn_ms"].get<std::vector<double>>();
        for (std::size_t round = 0; round < inTurn.size(); ++round)
            EXPECT_NEAR(inTurn[round], torchMs[round] / rowMs[round], 1e-9 * inTurn[round]) << round << row.dump();
        static_assert(kPrefillRoundsInTurn % 2 == 1, "an odd count: the median is one round's ratio");
        EXPECT_EQ(row["prefill_of_torch_in_turn"].get<double>(), middleOf(inTurn)) << row.dump();
        // The most the row could be: torch's median prefill over the row's linears alone at the line,
        // the median of the line's passes around each round.
        const auto lines = row["prefill_in_turn_compute_line_gflop_per_s"].get<std::vector<double>>();
        ASSERT_EQ(lines.size(), static_cast<std::size_t>(kPrefillRoundsInTurn)) << row.dump();
        for (const double line : lines) EXPECT_GT(line, 0.0) << row.dump();
        EXPECT_EQ(row["prefill_compute_line_gflop_per_s"].get<double>(), middleOf(lines)) << row.dump();
        const double atLine = row["prefill_linears_at_compute_line_ms"].get<double>();
        EXPECT_GT(atLine, 0.0) << row.dump();
        const double ceiling = middleOf(torchMs) / atLine;
        EXPECT_NEAR(row["prefill_ceiling_of_torch_in_turn"].get<double>(), ceiling, 1e-9 * ceiling) << row.dump();
    }
    // The same multiply-adds in both dtypes, each at its own line.
    const auto invariantRow = [&](const char* dtype) {
        for (const auto& row : j["rows"])
            if (row["dtype"] == dtype && row["kernels"] == "invariant") return row;
        return nlohmann::json();
    };
    const auto linearFlops = [&](const char* dtype) {
        const auto row = invariantRow(dtype);
        return row["prefill_linears_at_compute_line_ms"].get<double>() *
               row["prefill_compute_line_gflop_per_s"].get<double>();
    };
    EXPECT_NEAR(linearFlops("bf16"), linearFlops("fp32"), 1e-9 * linearFlops("fp32"));
    // Six shapes at one row and five (no lm_head) at the prompt's rows, for each of the four rows above;
    // the invariant kernels' prefill rows against their multiply-add rate, nothing else.
    EXPECT_EQ(j["kernel_rows"].size(), 4u * 11u);
    EXPECT_EQ(j["invariant_prefill_pair_path"], kernels::isaName(kernels::pairsPathForRows(kernels::bestIsa(), 5)));
    // Each against the run's line in the order its path takes (bf16: the pair order's where the path
    // is the best one, VDPBF16PS or its emulation; the FMAs' otherwise) and its own passes of it.
    for (const auto& k : j["kernel_rows"]) {
        EXPECT_EQ(k["path"].is_string(), k["kernels"] == "invariant") << k.dump();
        const bool measured = k["kernels"] == "invariant" && k["rows"].get<int>() > 1;
        EXPECT_EQ(k["fraction_of_peak"].is_number(), measured) << k.dump();
        EXPECT_EQ(k["fraction_of_adjacent_peak"].is_number(), measured) << k.dump();
        EXPECT_EQ(k["adjacent_peak_gflop_per_s"].is_number(), measured) << k.dump();
        if (!measured) continue;
        const bool pairLine = k["dtype"] == "bf16" && k["path"] == j["invariant_kernel_path"];
        const double peak = j[pairLine ? "peak_pair_order_gflop_per_s" : "peak_lane_order_gflop_per_s"].get<double>();
        const double rate = k["gflop_per_s"].get<double>(), adjacent = k["adjacent_peak_gflop_per_s"].get<double>();
        EXPECT_NEAR(k["fraction_of_peak"].get<double>(), rate / peak, 1e-9 * rate / peak) << k.dump();
        EXPECT_NEAR(k["fraction_of_adjacent_peak"].get<double>(), rate / adjacent, 1e-9 * rate / adjacent) << k.dump();
    }
    // The tile order's bf16 rows: on AMX where the CPU lends it, else on the reference; no peak.
    const auto tiles = runCli("bench --model " + model() +
                              " --prompt-tokens 5 --decode-tokens 1 --rebuild-tokens 1 --dtypes bf16 --kernels "
                              "invariant-tiles --json");
    ASSERT_EQ(tiles.exitCode, 0) << tiles.err;
    const auto t = nlohmann::json::parse(tiles.out);
    ASSERT_EQ(t["rows"].size(), 1u);
    EXPECT_EQ(t["rows"][0]["kernels"], "invariant-tiles");
    ASSERT_EQ(t["kernel_rows"].size(), 11u);
    for (const auto& k : t["kernel_rows"]) {
        if (k["shape"] == "lm_head") continue;  // the pair order's (Transformer::head)
        EXPECT_EQ(k["path"], kernels::bestTilePath() == kernels::TilePath::Amx ? "amx" : "scalar") << k.dump();
        EXPECT_TRUE(k["fraction_of_peak"].is_null()) << k.dump();
        EXPECT_TRUE(k["fraction_of_adjacent_peak"].is_null()) << k.dump();
    }
    const auto only =
        runCli("bench --model " + model() +
               " --prompt-tokens 4 --decode-tokens 1 --rebuild-tokens 1 --dtypes bf16 --kernels invariant "
               "--no-kernel-figures --json");
    ASSERT_EQ(only.exitCode, 0) << only.err;
    const auto k = nlohmann::json::parse(only.out);
    ASSERT_EQ(k["rows"].size(), 1u);
    EXPECT_EQ(k["rows"][0]["kernels"], "invariant");
    EXPECT_TRUE(k["kernel_rows"].empty());
    // No torch row in the run: nothing to time in turn against.
    EXPECT_TRUE(k["rows"][0]["prefill_of_torch_in_turn"].is_null()) << k.dump();
    EXPECT_TRUE(k["rows"][0]["prefill_in_turn_of_torch"].empty()) << k.dump();
    EXPECT_TRUE(k["rows"][0]["prefill_in_turn_ms"].empty()) << k.dump();
    // Its linears then at the run's line.
    const bool pairLine = k["invariant_prefill_pair_path"] == k["invariant_kernel_path"];
    const double runLine = k[pairLine ? "peak_pair_order_gflop_per_s" : "peak_lane_order_gflop_per_s"].get<double>();
    EXPECT_EQ(k["rows"][0]["prefill_compute_line_gflop_per_s"].get<double>(), runLine) << k.dump();
}

TEST(Cli, BenchCountsAPrefillsLinearMultiplyAdds) {
    // By hand, 2 layers, hidden 2, 1 query head and 1 KV head of 2, MLP 3, vocabulary 5, 4 rows: a row
    // of a layer is 8 multiply-adds in k/v and 26 in q/o/gate/up/down, the lm_head's row 10.
    ModelConfig c;
    c.hiddenSize = 2, c.numLayers = 2, c.numHeads = 1, c.numKvHeads = 1, c.headDim = 2, c.intermediateSize = 3;
    c.vocabSize = 5;
    EXPECT_EQ(prefillLinearFlops(c, 4, false), 2.0 * (4 * 34 + 4 * 34 + 10));
    EXPECT_EQ(prefillLinearFlops(c, 4, true), 2.0 * (4 * 34 + (4 * 8 + 26) + 10));
}

TEST(Cli, BenchSaysHowDecodeWeightsAreFetched) {
    // On the AVX-512 paths a decode row's weights are fetched kernels::decodeFetchBytes() ahead
    // (KVSCOPE_DECODE_FETCH_BYTES sets it); the other paths fetch in their own way: null.
    const kernels::Isa isa = kernels::bestIsa();
    const bool oneStream = isa == kernels::Isa::Avx512 || isa == kernels::Isa::Avx512Bf16;
    const std::string args = shortBench();
    const auto r = runCli(args + " --json", "KVSCOPE_DECODE_FETCH_BYTES=4096");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto fetch = nlohmann::json::parse(r.out)["invariant_decode_fetch_bytes"];
    if (oneStream)
        EXPECT_EQ(fetch, 4096);
    else
        EXPECT_TRUE(fetch.is_null()) << fetch;
    const auto text = runCli(args, "KVSCOPE_DECODE_FETCH_BYTES=0");
    ASSERT_EQ(text.exitCode, 0) << text.err;
    EXPECT_EQ(text.out.find("decode weights: the hardware prefetcher alone") != std::string::npos, oneStream)
        << text.out;
}

TEST(Cli, BenchNamesWhatTorchKernelsBf16ProductsRunOn) {
    EXPECT_EQ(oneDnnIsaName(0x3e7), "avx512_core_amx");  // oneDNN 2.x
    EXPECT_EQ(oneDnnIsaName(0xfef), "avx512_core_amx");  // 3.x
    EXPECT_EQ(oneDnnIsaName(0xe7), "avx512_core_bf16");
    EXPECT_EQ(oneDnnIsaName(0x12345), "0x12345");
    // The cap in the environment is reported; where oneDNN answers (a libtorch that links it as a
    // library of its own: Debian's), it names the capped set, read from oneDNN, not from the variable.
    const auto r = runCli(shortBench() + " --json", "ONEDNN_MAX_CPU_ISA=AVX2");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["torch_onednn_isa_cap"], "AVX2");
    if (torchOneDnnIsa().name.empty()) {  // this process has the same libtorch
        EXPECT_TRUE(j["torch_onednn_isa"].is_null()) << j["torch_onednn_isa"];
    } else if (cpuVectorFeatures().find("avx2") != std::string::npos) {
        EXPECT_EQ(j["torch_onednn_isa"], "avx2");
    }
}

TEST(Cli, BenchNamesWhatTorchKernelsFp32ProductsRunOn) {
    // An SSE kernel set on a CPU with more gets the OPENBLAS_CORETYPE of its widest one.
    EXPECT_EQ(openBlasCoreOf("Prescott", true, true).faster, "SkylakeX");
    EXPECT_EQ(openBlasCoreOf("Prescott", true, true).fasterIsa, "AVX-512");
    EXPECT_EQ(openBlasCoreOf("Nehalem", false, true).faster, "Haswell");
    EXPECT_EQ(openBlasCoreOf("Nehalem", false, true).fasterIsa, "AVX2");
    EXPECT_TRUE(openBlasCoreOf("Prescott", false, false).sseOnly);
    EXPECT_EQ(openBlasCoreOf("Prescott", false, false).faster, "");
    EXPECT_FALSE(openBlasCoreOf("SkylakeX", true, true).sseOnly);
    EXPECT_EQ(openBlasCoreOf("Haswell", true, true).faster, "");
    // What OpenBLAS itself says in the bench's process (forced to Prescott here), where this libtorch
    // has OpenBLAS (Debian's); nothing where it has not (a pip wheel's: MKL).
    const std::string args = shortBench();
    const auto r = runCli(args + " --json", "OPENBLAS_CORETYPE=Prescott");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    const auto core = nlohmann::json::parse(r.out)["torch_openblas_core"];
    const bool openBlas = !torchOpenBlasCore().name.empty();  // this process has the same libtorch
    if (openBlas)
        EXPECT_EQ(core, "Prescott");
    else
        EXPECT_TRUE(core.is_null()) << core;
    const auto text = runCli(args, "OPENBLAS_CORETYPE=Prescott");
    ASSERT_EQ(text.exitCode, 0) << text.err;
    const OpenBlasCore forced = openBlasCoreOnThisCpu("Prescott");
    EXPECT_EQ(text.out.find("torch kernels' fp32 products: OpenBLAS Prescott (SSE kernels: this OpenBLAS does not "
                            "know this CPU; OPENBLAS_CORETYPE=" +
                            forced.faster + " runs its " + forced.fasterIsa + " ones)") != std::string::npos,
              openBlas && !forced.faster.empty())
        << text.out;
}

TEST(Cli, GenerateJsonHasTheDocumentedKeys) {
    auto r = runCli("generate --model " + model() + " --prompt 'The model thinks' --max-new-tokens 6 --json");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    for (const char* key : {"prompt_ids", "generated_ids", "text", "steps"}) EXPECT_TRUE(j.contains(key)) << key;
    ASSERT_EQ(j["generated_ids"].size(), 6u);
    ASSERT_EQ(j["steps"].size(), 6u);
    const auto& step = j["steps"][0];
    for (const char* key : {"id", "logprob", "margin", "entropy", "top"}) EXPECT_TRUE(step.contains(key)) << key;
    EXPECT_EQ(step["id"], j["generated_ids"][0]);
    EXPECT_EQ(step["top"][0][0], step["id"]);  // greedy picks the top logit
    EXPECT_GE(step["margin"].get<double>(), 0.0);
}

TEST(Cli, PromptTextAndPromptIdsAreTheSameRun) {
    auto tok = runCli("tokenize --model " + model() + " --text 'Step 1: add the tens.' --json");
    ASSERT_EQ(tok.exitCode, 0) << tok.err;
    auto ids = nlohmann::json::parse(tok.out)["ids"].get<std::vector<int64_t>>();
    std::string csv;
    for (auto id : ids) csv += (csv.empty() ? "" : ",") + std::to_string(id);
    auto a = runCli("generate --model " + model() + " --prompt 'Step 1: add the tens.' --max-new-tokens 5 --json");
    auto b = runCli("generate --model " + model() + " --prompt-ids " + csv + " --max-new-tokens 5 --json");
    ASSERT_EQ(a.exitCode, 0) << a.err;
    ASSERT_EQ(b.exitCode, 0) << b.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["generated_ids"], nlohmann::json::parse(b.out)["generated_ids"]);
    EXPECT_EQ(nlohmann::json::parse(a.out)["prompt_ids"], nlohmann::json(ids));

    auto detok = runCli("detokenize --model " + model() + " --ids " + csv);
    EXPECT_EQ(detok.out, "Step 1: add the tens.\n");
}

// tokenize --messages renders the conversation (the assistant's turn opened) and tokenizes it as
// apply_chat_template does: a template's text with add_special_tokens off, plain text with it on.
TEST(Cli, TokenizeMessagesRendersTheChosenOrTheCheckpointsTemplate) {
    test::TempDir dir;
    const std::string copy = dir.file("model");
    std::filesystem::create_directories(copy);
    std::filesystem::copy_file(test::tinyModel("qwen2") + "/tokenizer.json", copy + "/tokenizer.json");
    const std::string conversation = dir.file("chat.json");
    test::writeTextFile(conversation, R"([{"role": "user", "content": "add the tens"}])");
    const std::string base = "tokenize --model " + shellQuote(copy) + " --messages " + shellQuote(conversation);
    auto ids = [](const test::CommandResult& r) {
        EXPECT_EQ(r.exitCode, 0) << r.err;
        return nlohmann::json::parse(r.out)["ids"];
    };
    auto textIds = [&](const std::string& text, bool special) {
        return ids(runCli("tokenize --model " + shellQuote(copy) + " --text " + shellQuote(text) + " --json" +
                          (special ? "" : " --no-special")));
    };
    EXPECT_EQ(ids(runCli(base + " --chat-template chatml --json")),
              textIds("<|im_start|>user\nadd the tens<|im_end|>\n<|im_start|>assistant\n", false));
    // auto without a template: the text as is; with one: the checkpoint's, its variables included.
    auto plain = runCli(base + " --json");
    EXPECT_EQ(ids(plain), textIds("add the tens", true));
    EXPECT_NE(plain.out.find("has no chat template"), std::string::npos) << plain.out;
    test::writeTextFile(
        copy + "/chat_template.jinja",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}{% if think %}<think>{% endif %}");
    EXPECT_EQ(ids(runCli(base + " --template-args '{\"think\": true}' --json")),
              textIds("<|im_start|>user\nadd the tens<|im_end|>\n<|im_start|>assistant\n<think>", false));
    EXPECT_EQ(runCli(base).out, [&] {
        std::string csv;
        for (const auto& id : textIds("<|im_start|>user\nadd the tens<|im_end|>\n<|im_start|>assistant\n", false))
            csv += (csv.empty() ? "" : ",") + std::to_string(id.get<int64_t>());
        return csv + "\n";
    }());
    // Bad input names what is wrong.
    test::writeTextFile(conversation, R"([{"role": "user"}])");
    expectOneLineError(runCli(base), "message 0");
    test::writeTextFile(conversation, R"([{"role": "user", "content": "x"}])");
    expectOneLineError(runCli(base + " --template-args '[1]'"), "--template-args");
    expectOneLineError(runCli(base + " --chat-template vicuna"), "vicuna");
    test::writeTextFile(copy + "/chat_template.jinja", "{% for m in messages %}{{ m.content }}");
    expectOneLineError(runCli(base), "chat_template.jinja");
}

TEST(Cli, SeededSamplingIsReproducibleAcrossProcesses) {
    const std::string args = "generate --model " + model("llama") +
                             " --prompt-ids 1,2,3 --temperature 1.3 --top-p 0.95 --seed 11 --max-new-tokens 10 --json";
    auto a = runCli(args), b = runCli(args);
    ASSERT_EQ(a.exitCode, 0) << a.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["generated_ids"], nlohmann::json::parse(b.out)["generated_ids"]);
    auto c = runCli("generate --model " + model("llama") +
                    " --prompt-ids 1,2,3 --temperature 1.3 --top-p 0.95 --seed 12 --max-new-tokens 10 --json");
    EXPECT_NE(nlohmann::json::parse(a.out)["generated_ids"], nlohmann::json::parse(c.out)["generated_ids"]);
}

TEST(Cli, Bf16AndQwen3Run) {
    auto r =
        runCli("generate --model " + model("qwen3") + " --prompt-ids 4,5,6 --dtype bf16 --max-new-tokens 3 --json");
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), 3u);
}

TEST(Cli, BadInputGivesOneLineErrors) {
    expectOneLineError(runCli("generate --model " + model() + " --prompt-ids 1,2 --dtype fp16 --kernels invariant"),
                       "fp16");
    expectOneLineError(runCli("generate --model " + model() + " --prompt-ids 1,x"), "'x'");
    expectOneLineError(runCli("generate --model " + model() + " --prompt-ids 999999"), "outside the vocabulary");
    expectOneLineError(runCli("generate --model " + model() + " --prompt hi --chat-template vicuna"), "vicuna");
    expectOneLineError(runCli("generate --model /nonexistent --prompt hi"), "/nonexistent");
    expectOneLineError(runCli("generate --model " + model()), "--prompt");
    expectOneLineError(runCli("frobnicate"), "frobnicate");
    expectOneLineError(runCli("detokenize --model " + model() + " --ids 1,2,99999"), "99999");
    expectOneLineError(runCli("generate --model " + model() + " --prompt hi --max-new-tokens 0"),
                       "--max-new-tokens: value 0: expected a number > 0");
    expectOneLineError(runCli("generate --model " + model() + " --prompt hi --temperature -0.5"),
                       "--temperature: value -0.5: expected a number >= 0");
}

TEST(Cli, CorruptWeightsAreAReadableError) {
    test::TempDir dir;
    std::filesystem::copy(test::tinyModel("qwen2"), dir.file("m"), std::filesystem::copy_options::recursive);
    std::filesystem::resize_file(dir.file("m/model.safetensors"), 1000);
    auto r = runCli("generate --model " + shellQuote(dir.file("m")) + " --prompt-ids 1,2");
    expectOneLineError(r, "model.safetensors");
    EXPECT_EQ(r.exitCode, 1);
}

TEST(Cli, MakeTestModelWritesALoadableShardedCheckpoint) {
    test::TempDir dir;
    auto r = runCli(
        "make-test-model --arch llama --layers 1 --hidden-size 32 --heads 2 --kv-heads 1 "
        "--intermediate-size 48 --shards 2 --seed 3 --out " +
        shellQuote(dir.file("m")));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_TRUE(std::filesystem::exists(dir.file("m/model.safetensors.index.json")));
    EXPECT_TRUE(std::filesystem::exists(dir.file("m/tokenizer.json")));
    auto g = runCli("generate --model " + shellQuote(dir.file("m")) + " --prompt hello --max-new-tokens 2");
    EXPECT_EQ(g.exitCode, 0) << g.err;
    // Same seed, same bytes.
    auto again = runCli(
        "make-test-model --arch llama --layers 1 --hidden-size 32 --heads 2 --kv-heads 1 "
        "--intermediate-size 48 --shards 2 --seed 3 --out " +
        shellQuote(dir.file("m2")));
    ASSERT_EQ(again.exitCode, 0);
    EXPECT_EQ(test::readTextFile(dir.file("m/model-00001-of-00002.safetensors")),
              test::readTextFile(dir.file("m2/model-00001-of-00002.safetensors")));
}

}  // namespace
}  // namespace kvscope
