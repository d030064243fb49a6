// SPDX-License-Identifier: MIT
#include "core/bench/benchmark.h"

#include "core/decode/generator.h"
#include "core/kernels/invariant_ops.h"
#include "core/model/random_checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/huge_pages.h"
#include "core/util/version.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>

namespace kvscope {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t half = values.size() / 2;
    return values.size() % 2 ? values[half] : (values[half - 1] + values[half]) / 2;
}

double tensorBytes(const torch::Tensor& t) {
    return t.defined() ? static_cast<double>(t.numel() * t.element_size()) : 0.0;
}

double weightBytesPerDecodeStep(const Transformer& model) {
    const Weights& w = model.weights();
    double total = tensorBytes(w.lmHead) + tensorBytes(w.finalNorm);
    for (const auto& l : w.layers)
        for (const auto* t : {&l.inputNorm, &l.wq, &l.bq, &l.wk, &l.bk, &l.wv, &l.bv, &l.qNorm, &l.kNorm, &l.wo,
                              &l.postNorm, &l.wGate, &l.wUp, &l.wDown})
            total += tensorBytes(*t);
    return total;
}

// All of a model's weights: a step's and the embedding, where it is not the lm_head's tensor.
double weightBytes(const Transformer& model) {
    const Weights& w = model.weights();
    return weightBytesPerDecodeStep(model) + (w.embed.is_same(w.lmHead) ? 0.0 : tensorBytes(w.embed));
}

std::string ensureModel(const BenchOptions& o, const std::function<void(const std::string&)>& log) {
    if (!o.modelDir.empty()) return o.modelDir;
    const std::string dir = (std::filesystem::path(o.cacheDir) / "bench-qwen2.5-0.5b-shape").string();
    if (!std::filesystem::exists(std::filesystem::path(dir) / "model.safetensors")) {
        log("generating a Qwen2.5-0.5B-shaped random model in " + dir + " (once)");
        RandomCheckpointSpec spec = qwen25HalfBillionShape();
        spec.dtype = torch::kBFloat16;  // half the disk; fp32 runs convert exactly on load
        writeRandomCheckpoint(spec, dir);
    }
    return dir;
}

// Greedy decode steps from a clone of `cache`, whose last position produced `logits`; the first
// step is taken here, untimed (it brings the step's code and the pool's threads in).
class GreedyDecode {
public:
    GreedyDecode(const Transformer& model, const KvCache& cache, const torch::Tensor& logits)
        : gen_(model), cache_(cache.clone()), next_(chooseToken(logits, {}, 0).id) {
        step();
    }
    void step() { next_ = chooseToken(gen_.decodeOne(next_, cache_), {}, 0).id; }

private:
    Generator gen_;
    KvCache cache_;
    int64_t next_;
};

// One decode step's linear layers and nothing else: every layer's projections for one row, in the
// order and with the calls a step makes them (the invariant kernels' fused q/k/v and gate/up
// regions; torch kernels' linear per weight), then the lm_head. The weights come from memory as in
// a step (the model's are far larger than the caches): the step's weight stream without the work
// between.
std::function<void()> decodeLinearsAlone(const Transformer& model) {
    const ModelConfig& c = model.config();
    auto row = [&](int64_t width) { return torch::randn({1, width}).to(model.dtype()).to(model.device()); };
    return [&model, hidden = row(c.hiddenSize), heads = row(c.numHeads * c.headDim), mlp = row(c.intermediateSize)] {
        const Weights& w = model.weights();
        const torch::ScalarType dtype = model.dtype();
        const bool invariant = model.invariant();
        auto project = [&](const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
            return invariant ? kernels::linear(x, weight, bias, dtype, kernels::bestIsa(), model.linearOrder())
                             : torch::linear(x, weight, bias);
        };
        for (const LayerWeights& l : w.layers) {
            if (invariant) {
                kernels::linears(hidden, {{l.wq, l.bq}, {l.wk, l.bk}, {l.wv, l.bv}}, dtype, kernels::bestIsa(),
                                 model.linearOrder());
            } else {
                for (const auto& [weight, bias] : {std::pair{l.wq, l.bq}, {l.wk, l.bk}, {l.wv, l.bv}})
                    project(hidden, weight, bias);
            }
            project(heads, l.wo, {});
            if (invariant) {
                kernels::linears(hidden, {{l.wGate, {}}, {l.wUp, {}}}, dtype, kernels::bestIsa(), model.linearOrder());
            } else {
                project(hidden, l.wGate, {});
                project(hidden, l.wUp, {});
            }
            project(mlp, l.wDown, {});
        }
        if (invariant) {
            kernels::linear(hidden, w.lmHead, {}, torch::kFloat32);
        } else {
            project(hidden, w.lmHead, {});
        }
    };
}

// `pairs` decode steps, each followed at once by its linears alone (decodeLinearsAlone), so that
// the two see the memory at the same rate (on a VM it moves by half between seconds; timed apart,
// their difference came out either sign: docs/history/kernel-measurements.md, "Steps against their
// linears"): fills row's linears time and the rest of a step, each the median over the pairs.
void timeStepsAgainstTheirLinears(const Transformer& model, const KvCache& cache, const torch::Tensor& logits,
                                  int64_t pairs, BenchRow& row) {
    GreedyDecode decode(model, cache, logits);
    const std::function<void()> linears = decodeLinearsAlone(model);
    linears();
    std::vector<double> linearSeconds, restSeconds;
    for (int64_t i = 0; i < pairs; ++i) {
        auto t0 = Clock::now();
        decode.step();
        const double step = secondsSince(t0);
        t0 = Clock::now();
        linears();
        linearSeconds.push_back(secondsSince(t0));
        restSeconds.push_back(step - linearSeconds.back());
    }
    row.decodeLinearsSecondsPerStep = median(linearSeconds);
    row.decodeRestSecondsPerStep = median(restSeconds);
}

// Forwards per second feeding `ids` one at a time into a fresh cache: how `audit` and `bridge`
// rebuild a trajectory where only token by token gives the live cache's bits.
double rebuildRate(const Transformer& model, const std::vector<int64_t>& ids) {
    KvCache cache = model.newCache(static_cast<int64_t>(ids.size()) + 1);
    const auto t0 = Clock::now();
    for (const int64_t id : ids) model.forward({id}, cache);
    return static_cast<double>(ids.size()) / secondsSince(t0);
}

// Greedy decode steps (GreedyDecode) in runs of kDecodeStepsBetweenReads, each run between two read
// passes of `probe`, whose figures count towards the run's bound (`passes`). Every timed step is
// thus bracketed by passes a few steps away: timed as one window of 32 steps instead, a decode came
// out above the bound, the window having caught a fast phase of the VM's memory alone
// (docs/history/kernel-measurements.md, "Decode window").
struct DecodeRuns {
    // The median run's steps over its time, and every run's steps over their time (the passes and
    // pauses apart).
    double tokensPerSecond = 0, meanTokensPerSecond = 0;
    // The memory's read rate around each run (the larger of its two passes) and the run's weight
    // stream as a fraction of it, each the median over the runs.
    double adjacentRead = 0, fractionOfAdjacentReads = 0;
    std::vector<double> stepSeconds;  // each run's time over its steps, in run order
};
DecodeRuns decodeBetweenReads(const Transformer& model, const KvCache& cache, const torch::Tensor& logits,
                              int64_t steps, double weightBytesPerToken, const BandwidthProbe& probe,
                              std::vector<double>& passes) {
    // Before a pass, the threads of the step's kernels go to sleep (kernel_threads.cpp spins 5 ms;
    // OpenBLAS's threads yield): spinning, they would take a core from the probe.
    auto settledReadPass = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        passes.push_back(probe.readPass());
        return passes.back();
    };
    GreedyDecode decode(model, cache, logits);
    std::vector<double> reads, fractions, stepSeconds;
    double seconds = 0;
    double before = settledReadPass();
    for (int64_t done = 0; done < steps; done += kDecodeStepsBetweenReads) {
        const int64_t run = std::min(kDecodeStepsBetweenReads, steps - done);
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < run; ++i) decode.step();
        const double runSeconds = secondsSince(t0);
        seconds += runSeconds;
        stepSeconds.push_back(runSeconds / static_cast<double>(run));
        const double stream = static_cast<double>(run) * weightBytesPerToken / runSeconds;
        const double after = settledReadPass(), memory = std::max(before, after);
        reads.push_back(memory);
        fractions.push_back(stream / memory);
        before = after;
    }
    return {1 / median(stepSeconds), static_cast<double>(steps) / seconds, median(reads), median(fractions),
            stepSeconds};
}

BenchRow measureRow(const Transformer& model, const std::vector<int64_t>& prompt, const BenchOptions& o,
                    const BandwidthProbe& probe, const std::function<void(const std::string&)>& log) {
    Generator gen(model);
    BenchRow row;
    row.dtype = dtypeName(model.dtype());
    row.kernels = kernelsName(model.numerics().kernels);
    const std::string label = row.dtype + ", " + row.kernels + " kernels";
    row.weightBytesPerToken = weightBytesPerDecodeStep(model);
    log("prefill " + std::to_string(prompt.size()) + " tokens, " + std::to_string(kPrefillTrials) +
        " times after a warm-up (" + label + ")");
    KvCache cache = model.newCache(o.promptTokens + o.decodeTokens + 2);
    gen.prefill(prompt, cache);  // warm-up
    torch::Tensor logits;
    for (int trial = 0; trial < kPrefillTrials; ++trial) {
        cache = model.newCache(o.promptTokens + o.decodeTokens + 2);
        const auto t0 = Clock::now();
        logits = gen.prefill(prompt, cache);
        row.prefillTrialSeconds.push_back(secondsSince(t0));
    }
    row.prefillSeconds = median(row.prefillTrialSeconds);
    row.prefillTokensPerSecond = static_cast<double>(prompt.size()) / row.prefillSeconds;

    log("decode " + std::to_string(o.decodeTokens) + " tokens between read passes (" + label + ")");
    const DecodeRuns runs = decodeBetweenReads(model, cache, logits, o.decodeTokens, row.weightBytesPerToken, probe,
                                               row.adjacentReadPasses);
    row.decodeTokensPerSecond = runs.tokensPerSecond;
    row.decodeMeanTokensPerSecond = runs.meanTokensPerSecond;
    row.adjacentReadBytesPerSecond = runs.adjacentRead;
    row.decodeFractionOfAdjacentReads = runs.fractionOfAdjacentReads;
    row.decodeRunStepSeconds = runs.stepSeconds;
    timeStepsAgainstTheirLinears(model, cache, logits, std::min<int64_t>(o.decodeTokens, kStepLinearsPairs), row);
    if (model.numerics().kernels == Kernels::Torch) {
        Numerics matrixVector;
        matrixVector.matrixVectorDecode = true;  // the same weight tensors, other decode kernels
        const Transformer mv(model.config(), model.weights(), model.dtype(), model.device(), matrixVector);
        log("decode " + std::to_string(o.decodeTokens) + " tokens with --decode-kernel mv (" + label + ")");
        row.decodeMatrixVectorTokensPerSecond =
            decodeBetweenReads(mv, cache, logits, o.decodeTokens, row.weightBytesPerToken, probe,
                               row.adjacentReadPasses)
                .tokensPerSecond;
    }
    const int64_t rebuilt = std::min<int64_t>(o.rebuildTokens, static_cast<int64_t>(prompt.size()));
    log("rebuild " + std::to_string(rebuilt) + " ids token by token (" + label + ")");
    row.rebuildTokensPerSecond = rebuildRate(model, std::vector<int64_t>(prompt.begin(), prompt.begin() + rebuilt));
    return row;
}

// Which of the invariant kernels' multiply-add rates bounds a linear computed on `path`: the pair
// order's where bf16 rows take it on the best path (VDPBF16PS, or its emulation where that is the
// best), the FMAs' otherwise (fp32, or the pair order by FMAs on packed copies); none for torch's
// kernels and AMX's tile order, whose rates are not measured.
enum class ComputeLine { None, PairOrder, LaneOrder };
constexpr std::size_t kComputeLines = 3;  // one figure per ComputeLine, indexed by it
ComputeLine computeLineOn(const Transformer& model, const std::string& path) {
    const Kernels kernels = model.numerics().kernels;
    const bool bf16 = model.dtype() == torch::kBFloat16;
    if (kernels == Kernels::Torch || (bf16 && kernels == Kernels::InvariantTiles)) return ComputeLine::None;
    return bf16 && path == kernels::isaName(kernels::bestIsa()) ? ComputeLine::PairOrder : ComputeLine::LaneOrder;
}

double runLine(const BenchReport& r, ComputeLine line) {
    if (line == ComputeLine::None) return 0;
    return line == ComputeLine::PairOrder ? r.pairFlopsPerSecond : r.laneFlopsPerSecond;
}

// One pass of the line, now (about 60 ms a thread on AVX-512).
double lineNow(ComputeLine line) {
    return line == ComputeLine::None ? 0 : measureMultiplyAdds(line == ComputeLine::PairOrder, 1);
}

// A kernel row's time (best of a few calls after one warm-up call) and its rates.
template <typename Call>
void timeCalls(KernelRow& row, const torch::Tensor& w, const Call& call) {
    call();
    row.seconds = 1e30;
    const int calls = row.rows == 1 ? 20 : 3;
    for (int i = 0; i < calls; ++i) {
        const auto t0 = Clock::now();
        call();
        row.seconds = std::min(row.seconds, secondsSince(t0));
    }
    row.weightBytesPerSecond = static_cast<double>(w.numel() * w.element_size()) / row.seconds;
    row.flopsPerSecond = 2.0 * static_cast<double>(row.rows * row.in * row.out) / row.seconds;
}

// The path that computes a linear of `rows` rows of the model under invariant kernels in `order`:
// in the tile order "amx" or "scalar" (bf16), in the pair order the instruction set's
// (kernels::pairsPathForRows).
std::string invariantPath(const Transformer& model, int64_t rows, kernels::LinearOrder order) {
    const kernels::Isa best = kernels::bestIsa();
    if (model.dtype() != torch::kBFloat16) return kernels::isaName(best);
    if (order == kernels::LinearOrder::Tiles)
        return kernels::bestTilePath() == kernels::TilePath::Amx ? "amx" : "scalar";
    return kernels::isaName(kernels::pairsPathForRows(best, rows));
}

// The model's linear shapes, each timed alone; a prefill row between two passes of its line.
std::vector<KernelRow> measureKernels(const BenchReport& report, const Transformer& model, int64_t prefillRows) {
    const LayerWeights& l = model.weights().layers.front();
    const std::vector<std::pair<std::string, torch::Tensor>> shapes = {
        {"q_proj", l.wq},       {"k_proj", l.wk},       {"o_proj", l.wo},
        {"gate_proj", l.wGate}, {"down_proj", l.wDown}, {"lm_head", model.weights().lmHead}};
    std::vector<KernelRow> rows;
    for (const int64_t n : {int64_t{1}, prefillRows}) {
        for (const auto& shape : shapes) {
            // Not a structured binding: clang before 16 cannot capture one in the lambda below.
            const std::string& name = shape.first;
            const torch::Tensor& w = shape.second;
            if (name == "lm_head" && n > 1) continue;  // a prefill computes the last row's logits only
            const torch::Tensor x = torch::randn({n, w.size(1)}).to(model.dtype());
            KernelRow row;
            row.dtype = dtypeName(model.dtype());
            row.kernels = kernelsName(model.numerics().kernels);
            row.shape = name;
            row.rows = n, row.in = w.size(1), row.out = w.size(0);
            // As the forward computes them: the lm_head in the pair order (Transformer::head says why).
            const kernels::LinearOrder order = name == "lm_head" ? kernels::LinearOrder::Pairs : model.linearOrder();
            if (model.invariant()) row.path = invariantPath(model, n, order);
            auto call = [&] {
                return model.invariant() ? kernels::linear(x, w, {}, model.dtype(), kernels::bestIsa(), order)
                                         : torch::linear(x, w);
            };
            const ComputeLine line = n > 1 && model.invariant() ? computeLineOn(model, row.path) : ComputeLine::None;
            row.peakFlopsPerSecond = runLine(report, line);
            const double before = lineNow(line);
            timeCalls(row, w, call);
            row.adjacentPeakFlopsPerSecond = std::max(before, lineNow(line));
            rows.push_back(row);
        }
    }
    return rows;
}

}  // namespace

// One prefill of `prompt` into a fresh cache, in seconds.
double timedPrefill(const Transformer& model, const std::vector<int64_t>& prompt, const BenchOptions& o) {
    Generator gen(model);
    KvCache cache = model.newCache(o.promptTokens + 2);
    const auto t0 = Clock::now();
    gen.prefill(prompt, cache);
    return secondsSince(t0);
}

double prefillLinearFlops(const ModelConfig& c, int64_t rows, bool lastLayerOnLastRow) {
    const double hidden = static_cast<double>(c.hiddenSize), mlp = static_cast<double>(c.intermediateSize);
    const double queries = static_cast<double>(c.numHeads * c.headDim),
                 kv = static_cast<double>(c.numKvHeads * c.headDim);
    const double keysValues = 2 * hidden * kv;                         // k_proj, v_proj: a row's multiply-adds
    const double rest = 2 * hidden * queries + 3 * hidden * mlp;       // q_proj, o_proj, gate, up, down
    const double layer = static_cast<double>(rows) * (keysValues + rest);
    const double last = lastLayerOnLastRow ? static_cast<double>(rows) * keysValues + rest : layer;
    return 2 * (static_cast<double>(c.numLayers - 1) * layer + last + hidden * static_cast<double>(c.vocabSize));
}

namespace {
// The line that bounds `model`'s prefill: its linears' path's (prefillPairPath for a
// bf16 model's pair order).
ComputeLine prefillLine(const BenchReport& r, const Transformer& model) {
    return computeLineOn(model, model.dtype() == torch::kBFloat16 ? r.prefillPairPath : r.kernelPath);
}

// The row's compute line (0: not measured) and its linears' time at it, a prefill of `rows` rows.
void setComputeLine(BenchRow& row, const Transformer& model, int64_t rows, double line) {
    row.prefillComputeLineFlopsPerSecond = line;
    row.prefillLinearsAtComputeLineSeconds = line > 0 ? prefillLinearFlops(model.config(), rows, true) / line : 0;
}
}  // namespace

// rows[i]'s prefill against torch kernels' (models[torchAt]) in turn (BenchRow::prefillInTurnOfTorch):
// every round times each model once, in the run's order, after an untimed round; a pass of each
// row's compute line before the first round and after every round.
void comparePrefillsInTurn(const BenchReport& report, const std::deque<Transformer>& models, std::size_t torchAt,
                           const std::vector<int64_t>& prompt, const BenchOptions& o, BenchRow* rows) {
    std::vector<ComputeLine> lines;
    for (const Transformer& model : models) lines.push_back(prefillLine(report, model));
    // A pass of each line some row takes (indexed by ComputeLine), now.
    auto passOfEachLine = [&] {
        std::array<double, kComputeLines> pass{};
        for (const ComputeLine line : lines)
            if (pass[static_cast<std::size_t>(line)] == 0) pass[static_cast<std::size_t>(line)] = lineNow(line);
        return pass;
    };
    std::array<double, kComputeLines> before{};
    for (int round = -1; round < kPrefillRoundsInTurn; ++round) {
        std::vector<double> seconds;
        for (const Transformer& model : models) seconds.push_back(timedPrefill(model, prompt, o));
        const std::array<double, kComputeLines> after = passOfEachLine();
        if (round >= 0)  // round -1 is untimed: its pass is only the first round's `before`
            for (std::size_t i = 0; i < models.size(); ++i) {
                rows[i].prefillInTurnSeconds.push_back(seconds[i]);
                if (i == torchAt) continue;
                rows[i].prefillInTurnOfTorch.push_back(seconds[torchAt] / seconds[i]);
                const auto line = static_cast<std::size_t>(lines[i]);
                if (lines[i] != ComputeLine::None)
                    rows[i].prefillInTurnLineFlopsPerSecond.push_back(std::max(before[line], after[line]));
            }
        before = after;
    }
    const double torchSeconds = median(rows[torchAt].prefillInTurnSeconds);
    for (std::size_t i = 0; i < models.size(); ++i) {
        if (i == torchAt) continue;
        rows[i].prefillOfTorchInTurn = median(rows[i].prefillInTurnOfTorch);
        if (rows[i].prefillInTurnLineFlopsPerSecond.empty()) continue;
        setComputeLine(rows[i], models[i], o.promptTokens, median(rows[i].prefillInTurnLineFlopsPerSecond));
        rows[i].prefillCeilingOfTorchInTurn = torchSeconds / rows[i].prefillLinearsAtComputeLineSeconds;
    }
}

namespace {

// The machine and libraries the run measures on: paths, versions, caches, pages.
void describeMachine(BenchReport& report, const BenchOptions& o) {
    report.threads = at::get_num_threads();
    report.libtorch = libtorchVersion() + " (" + libtorchLibraryPath() + ")";
    report.cpuFeatures = cpuVectorFeatures();
    report.kernelPath = kernels::isaName(kernels::bestIsa());
    report.prefillPairPath = kernels::isaName(kernels::pairsPathForRows(kernels::bestIsa(), o.promptTokens));
    if (kernels::bestIsa() == kernels::Isa::Avx512 || kernels::bestIsa() == kernels::Isa::Avx512Bf16)
        report.decodeFetchBytes = kernels::decodeFetchBytes();
    report.torchOneDnn = torchOneDnnIsa();
    report.torchOpenBlas = torchOpenBlasCore();
    report.lastLevelCacheBytes = lastLevelCacheBytes();
    report.bandwidthArrayBytes = streamArrayBytes(report.lastLevelCacheBytes, physicalMemoryBytes());
    report.transparentHugePages = transparentHugePagesMode();
}

// The bound is the best pass over the whole run, probed again before each row and at the end: a
// VM's bandwidth moves within minutes, and a bound probed only at the start read under a later
// row's decode (docs/history/measurements-0.2.md, "The remedy's speed and the study"). The read passes between a
// row's decode runs count towards it too.
class BoundTracker {
public:
    explicit BoundTracker(BenchReport& report) : report_(report), probe_(report.bandwidthArrayBytes) {}
    const BandwidthProbe& probe() const { return probe_; }
    void count(const std::vector<double>& passes) {
        for (const double read : passes)
            report_.readBandwidthBytesPerSecond = std::max(report_.readBandwidthBytesPerSecond, read);
        report_.boundBandwidthBytesPerSecond =
            std::max(report_.readBandwidthBytesPerSecond, report_.triadBandwidthBytesPerSecond);
        report_.bandwidthPasses += static_cast<int>(passes.size());
        readPasses_.insert(readPasses_.end(), passes.begin(), passes.end());
    }
    void measure(int passes) {
        const Bandwidth b = probe_.measure(passes);
        report_.triadBandwidthBytesPerSecond = std::max(report_.triadBandwidthBytesPerSecond, b.triad);
        count(b.readPasses);
    }
    double medianRead() const { return median(readPasses_); }

private:
    BenchReport& report_;
    const BandwidthProbe probe_;
    std::vector<double> readPasses_;
};

// One dtype: its weights loaded once, a row per kernel choice on those weights, their prefills in
// turn against torch kernels'. Returns the loaded model, whose weights the caller may keep.
Transformer measureDtype(BenchReport& report, torch::ScalarType dtype, const BenchOptions& o, BoundTracker& bound,
                         const std::function<void(const std::string&)>& log) {
    log("loading the model in " + dtypeName(dtype));
    const int64_t hugeBefore = hugePageBytesInUse();
    // Loaded as for invariant kernels on the CPU: every weight 64-byte aligned, the same for every
    // row (torch kernels would place weights at the file's alignment, for transformers' bits).
    Numerics placement;
    if (o.device.is_cpu()) placement.kernels = Kernels::Invariant;
    Transformer loaded = Transformer::load(report.modelDir, dtype, o.device, nullptr, placement);
    const int64_t hugeAfter = hugePageBytesInUse();
    const int64_t weightsOnHugePages =
        hugeBefore >= 0 && hugeAfter >= 0 ? std::max<int64_t>(0, hugeAfter - hugeBefore) : -1;
    // Spread over the vocabulary, like text (the values do not change the work a forward does).
    std::vector<int64_t> prompt;
    const int64_t vocab = loaded.config().vocabSize;
    for (int64_t i = 0; i < o.promptTokens; ++i) prompt.push_back((i * 7919 + 13) % vocab);
    std::deque<Transformer> models;  // kept for the prefills in turn below
    const std::size_t firstRow = report.rows.size();
    for (const Kernels k : o.kernels) {
        Numerics numerics;
        numerics.kernels = k;  // the same weight tensors under each kernel choice
        const Transformer& model = models.emplace_back(loaded.config(), loaded.weights(), dtype, o.device, numerics);
        log("measuring memory bandwidth again (" + std::to_string(kLaterBandwidthPasses) + " passes)");
        bound.measure(kLaterBandwidthPasses);
        BenchRow& row = report.rows.emplace_back(measureRow(model, prompt, o, bound.probe(), log));
        bound.count(row.adjacentReadPasses);
        row.weightBytesOnHugePages = weightsOnHugePages;
        setComputeLine(row, model, o.promptTokens, runLine(report, prefillLine(report, model)));
        if (o.kernelFigures) {
            log("kernel figures (" + dtypeName(dtype) + ", " + kernelsName(k) + ")");
            for (const KernelRow& kernelRow : measureKernels(report, model, o.promptTokens))
                report.kernelRows.push_back(kernelRow);
        }
    }
    const auto torchAt = std::find(o.kernels.begin(), o.kernels.end(), Kernels::Torch);
    if (torchAt != o.kernels.end() && o.kernels.size() > 1) {
        log("prefill under each kernel choice in turn, " + std::to_string(kPrefillRoundsInTurn) +
            " rounds after an untimed one (" + dtypeName(dtype) + ")");
        comparePrefillsInTurn(report, models, static_cast<std::size_t>(torchAt - o.kernels.begin()), prompt, o,
                              report.rows.data() + firstRow);
    }
    return loaded;
}

}  // namespace

BenchReport runBenchmark(const BenchOptions& o, const std::function<void(const std::string&)>& log) {
    BenchReport report;
    report.modelDir = ensureModel(o, log);
    describeMachine(report, o);
    BoundTracker bound(report);
    log("measuring memory bandwidth (read and triad, " + std::to_string(report.threads) + " threads, arrays of " +
        std::to_string(report.bandwidthArrayBytes >> 20) + " MiB)");
    bound.measure(kFirstBandwidthPasses);
    log("measuring the invariant kernels' multiply-add rate (" + report.kernelPath + " path)");
    report.pairFlopsPerSecond = measureMultiplyAdds(true);
    report.laneFlopsPerSecond = measureMultiplyAdds(false);
    // Each dtype's weights stay until the end of the run while they take little of the memory: freed
    // between dtypes, they would go back to the kernel while the next dtype's rows run (the reason
    // BandwidthProbe keeps its arrays).
    std::vector<Weights> keptWeights;
    double keptBytes = 0;
    for (const auto dtype : o.dtypes) {
        const Transformer loaded = measureDtype(report, dtype, o, bound, log);
        const double bytes = weightBytes(loaded);
        if (keptBytes + bytes <= static_cast<double>(physicalMemoryBytes()) / 4) {
            keptWeights.push_back(loaded.weights());
            keptBytes += bytes;
        }
    }
    log("measuring memory bandwidth a last time (" + std::to_string(kLaterBandwidthPasses) + " passes)");
    bound.measure(kLaterBandwidthPasses);
    report.readBandwidthMedianBytesPerSecond = bound.medianRead();
    for (BenchRow& row : report.rows)
        row.boundTokensPerSecond = report.boundBandwidthBytesPerSecond / row.weightBytesPerToken;
    return report;
}

}  // namespace kvscope
