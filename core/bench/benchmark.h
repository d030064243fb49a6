// SPDX-License-Identifier: MIT
#pragma once
// `kvscope bench`: prefill, decode and token-by-token rebuild throughput on a Qwen2.5-0.5B-shaped
// model for each dtype and kernel choice, next to the decode rate this machine's memory bandwidth
// allows, and per-shape kernel figures; everything measured in the same run, so ratios compare.
#include "core/bench/machine_probes.h"
#include "core/model/config.h"
#include "core/model/numerics.h"
#include "core/util/version.h"

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace kvscope {

struct BenchOptions {
    std::string modelDir;          // empty: a generated Qwen2.5-0.5B-shaped model in cacheDir
    std::string cacheDir;          // where the generated model is kept between runs
    int64_t promptTokens = 512;
    int64_t decodeTokens = 32;
    int64_t rebuildTokens = 32;    // ids rebuilt token by token (a sample of the prompt's first ones)
    std::vector<torch::ScalarType> dtypes = {torch::kFloat32, torch::kBFloat16};
    std::vector<Kernels> kernels = {Kernels::Torch, Kernels::Invariant};
    bool kernelFigures = true;     // the per-shape linear table
    torch::Device device = torch::kCPU;
};

struct BenchRow {
    std::string dtype, kernels;
    // The median of kPrefillTrials prefills of the whole prompt, each into a fresh cache, after one
    // untimed prefill of the same length (first touches of its buffers, kernel selection).
    double prefillSeconds = 0, prefillTokensPerSecond = 0;
    std::vector<double> prefillTrialSeconds;  // each timed prefill, in run order
    // The same prompt's prefill against torch kernels' of the same dtype, the two in turn: each of
    // kPrefillRoundsInTurn rounds times one prefill under every kernel choice of the run, one after
    // another. prefillInTurnSeconds: this row's prefill in each round (every row, where the run has a
    // torch row and another); prefillInTurnOfTorch: torch's time over this row's in each round (not
    // for torch's own row); prefillOfTorchInTurn: their median.
    std::vector<double> prefillInTurnSeconds, prefillInTurnOfTorch;
    double prefillOfTorchInTurn = 0;
    // What bounds an invariant prefill: its linears' multiply-adds (prefillLinearFlops) alone at the
    // compute line in the order they take (0 where that rate is not measured: torch kernels, AMX's
    // tile order), and torch's median prefill in turn over that time, the most this row's
    // prefillOfTorchInTurn could be (0 without a torch row). The line (prefillComputeLineFlopsPerSecond)
    // is the median of prefillInTurnLineFlopsPerSecond where the rounds in turn ran, the run's
    // (BenchReport) otherwise.
    double prefillLinearsAtComputeLineSeconds = 0, prefillCeilingOfTorchInTurn = 0,
           prefillComputeLineFlopsPerSecond = 0;
    // The compute line around each round in turn: a pass right before the round and one right after
    // it, the larger. A VM's arithmetic rate moves as its memory's does (docs/history/
    // kernel-measurements.md, "Compute line drift").
    std::vector<double> prefillInTurnLineFlopsPerSecond;
    // Greedy steps in runs of kDecodeStepsBetweenReads between read passes that count towards the
    // bound, so that the memory is probed within a few steps of each timed one: the median run's
    // steps over its time, as the prefill is its trials' median and the bound the best pass, so that
    // a run the VM's host stalled (decodeRunStepSeconds) does not stand for the kernels' speed; and
    // all the runs' steps over their time, what a user waits, stalls included.
    double decodeTokensPerSecond = 0, decodeMeanTokensPerSecond = 0;
    // A decode step's linear layers alone, timed in the step's order with the step's calls (one row,
    // weights from memory): the part of a step that streams weights. The rest is everything else: a
    // step's time less its linears', the linears timed right after the step (same memory rate).
    // Each the median over kStepLinearsPairs such pairs; the rest may come out below 0 by noise.
    double decodeLinearsSecondsPerStep = 0, decodeRestSecondsPerStep = 0;
    double decodeStepSeconds() const { return 1.0 / decodeTokensPerSecond; }
    double decodeLinearsBytesPerSecond() const { return weightBytesPerToken / decodeLinearsSecondsPerStep; }
    double decodeMatrixVectorTokensPerSecond = 0;  // torch kernels with --decode-kernel mv; 0 otherwise
    double rebuildTokensPerSecond = 0;   // the prompt's first ids fed one forward per token
    double weightBytesPerToken = 0;      // bytes of weights one decode step must read
    double boundTokensPerSecond = 0;     // bandwidth / weightBytesPerToken
    // Of those runs of decode steps: the memory's read rate around a run (the larger of its two
    // passes) and the steps' weight stream as a fraction of it, each the median over the runs.
    double adjacentReadBytesPerSecond = 0, decodeFractionOfAdjacentReads = 0;
    // Each of those runs' time over its steps, in run order: a run the VM's host slowed shows here,
    // which the mean averages in (docs/history/kernel-measurements.md, "Slowed decode runs").
    std::vector<double> decodeRunStepSeconds;
    // Every pass around the row's decode runs (those of decode mv too): they count towards the bound.
    std::vector<double> adjacentReadPasses;
    // How much of the weights the kernel put on 2 MiB pages (the process's AnonHugePages grown by the
    // load, util/huge_pages.h); -1 where the kernel does not say.
    int64_t weightBytesOnHugePages = -1;
};

// One linear layer's shape of the model, timed alone: rows = 1 is a decode step (reported as weight
// bytes per second), rows = promptTokens a prefill (reported as FLOP per second).
struct KernelRow {
    std::string dtype, kernels, shape;
    std::string path;  // the invariant kernels' instruction-set path that computed it; empty for torch's
    int64_t rows = 0, in = 0, out = 0;
    double seconds = 0;
    double weightBytesPerSecond = 0, flopsPerSecond = 0;
    // The invariant kernels' compute line in the order this row's path takes, for a prefill row (0
    // otherwise: torch's kernels, AMX's tile order, a decode row, which streams weights): the run's
    // (BenchReport), and the larger of a pass right before its timed calls and one right after.
    double peakFlopsPerSecond = 0, adjacentPeakFlopsPerSecond = 0;
};

struct BenchReport {
    std::string modelDir;
    std::string libtorch;                // version and the library file actually loaded
    std::string cpuFeatures;             // the vector extensions that decide kernels (and bits)
    std::string kernelPath;              // the invariant kernels' instruction set here
    std::string prefillPairPath;         // theirs for a bf16 prefill's linears (kernels::pairsPathForRows)
    // How far ahead a decode row's weights are fetched into L2 (kernels::decodeFetchBytes), on the
    // AVX-512 paths; -1 on the others, which fetch in their own way.
    int64_t decodeFetchBytes = -1;
    OneDnnIsa torchOneDnn;               // what torch kernels' bf16 products run on (AMX or not)
    OpenBlasCore torchOpenBlas;          // what their fp32 products run on, where OpenBLAS does them
    // Best of every pass of the run (kFirstBandwidthPasses first, kLaterBandwidthPasses before each
    // row and at the end, and the read passes between each row's decode runs), so that the bound is
    // a ceiling over the time the rows ran in.
    double readBandwidthBytesPerSecond = 0;   // vectorised read of one large array, best of passes and streams
    double triadBandwidthBytesPerSecond = 0;  // STREAM triad, best of passes
    double boundBandwidthBytesPerSecond = 0;  // the larger: what a decode step can at best stream
    int bandwidthPasses = 0;
    // The median pass's read: how far the best pass stands above what the memory usually gave (on a
    // VM, bursts of a few milliseconds read far above it).
    double readBandwidthMedianBytesPerSecond = 0;
    std::size_t lastLevelCacheBytes = 0;      // 0 where the system does not say
    std::size_t bandwidthArrayBytes = 0;      // each probe array (streamArrayBytes)
    // The kernel's transparent huge page mode: the weights and the probe arrays are advised onto
    // 2 MiB pages alike, so the bound reads memory as a decode step does.
    std::string transparentHugePages;
    // The invariant kernels' arithmetic ceiling here (FLOP = 2 per multiply-add), in each order: what
    // bounds a prefill's linears (measureMultiplyAdds).
    double pairFlopsPerSecond = 0, laneFlopsPerSecond = 0;
    int threads = 0;
    std::vector<BenchRow> rows;
    std::vector<KernelRow> kernelRows;
};

constexpr int kFirstBandwidthPasses = 5, kLaterBandwidthPasses = 2;
// A decode run between two read passes (BenchRow::decodeTokensPerSecond): short enough that the
// memory's rate holds over it (it moves by half between seconds on a VM), long enough (4 bf16 steps
// of a 0.5B model: ~0.12 s) that the passes around it take a fifth of the time.
constexpr int64_t kDecodeStepsBetweenReads = 4;
// Timed prefills a row (the median is reported), after an untimed one of the same length. One
// prefill right after a 16-token warm-up paid the first touches of every buffer the prompt sizes
// (docs/history/kernel-measurements.md, "Prefill warm-up").
constexpr int kPrefillTrials = 3;
// Rounds of prefills under each kernel choice in turn (BenchRow::prefillInTurnOfTorch), after an
// untimed round. A row's own prefills come minutes after the torch row's, and a VM's speed moves by
// several percent in minutes (docs/history/kernel-measurements.md, "Prefills in turn"). In one
// round both see the same machine.
constexpr int kPrefillRoundsInTurn = 5;
// Decode steps each timed against its linears alone (BenchRow::decodeLinearsSecondsPerStep), at
// most --decode-tokens of them.
constexpr int64_t kStepLinearsPairs = 8;

// A prefill's linears' floating-point operations (2 a multiply-add) over `rows` rows: every layer's
// q/k/v/o and MLP projections for every row, the lm_head for the last row alone; with
// lastLayerOnLastRow (invariant kernels, Span::lastLayerOnLastRow) the last layer's k and v for
// every row and the rest of it for the last row.
double prefillLinearFlops(const ModelConfig& config, int64_t rows, bool lastLayerOnLastRow);

BenchReport runBenchmark(const BenchOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace kvscope
