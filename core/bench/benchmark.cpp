// SPDX-License-Identifier: MIT
#include "core/bench/benchmark.h"

#include "core/decode/generator.h"
#include "core/model/random_checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/version.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

namespace kvscope {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double weightBytesPerDecodeStep(const Transformer& model) {
    const Weights& w = model.weights();
    auto bytes = [](const torch::Tensor& t) {
        return t.defined() ? static_cast<double>(t.numel() * t.element_size()) : 0.0;
    };
    double total = bytes(w.lmHead) + bytes(w.finalNorm);
    for (const auto& l : w.layers)
        for (const auto* t : {&l.inputNorm, &l.wq, &l.bq, &l.wk, &l.bk, &l.wv, &l.bv, &l.qNorm, &l.kNorm, &l.wo,
                              &l.postNorm, &l.wGate, &l.wUp, &l.wDown})
            total += bytes(*t);
    return total;
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

// Decode steps per second from a clone of `cache` (whose last position produced `logits`), after
// one untimed step.
double decodeRate(const Transformer& model, const KvCache& cache, const torch::Tensor& logits, int64_t steps) {
    Generator gen(model);
    KvCache c = cache.clone();
    int64_t next = chooseToken(logits, {}, 0).id;
    next = chooseToken(gen.decodeOne(next, c), {}, 0).id;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) next = chooseToken(gen.decodeOne(next, c), {}, 0).id;
    return static_cast<double>(steps) / secondsSince(t0);
}

}  // namespace

double measureTriadBandwidth(std::size_t bytesPerArray, int passes) {
    // Plain threads, one contiguous slice each, as many as libtorch uses: the same cores a decode
    // step has. Counted the STREAM way: two arrays read, one written.
    const int64_t n = static_cast<int64_t>(bytesPerArray / sizeof(float));
    const int threads = std::max(1, at::get_num_threads());
    std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]);
    auto forEachSlice = [&](auto&& body) {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(n * t / threads, n * (t + 1) / threads); });
        for (auto& th : pool) th.join();
    };
    forEachSlice([&](int64_t lo, int64_t hi) {  // first touch from the thread that will stream it
        for (int64_t i = lo; i < hi; ++i) a[i] = 0.f, b[i] = 1.f, c[i] = 2.f;
    });
    double best = 0;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = Clock::now();
        forEachSlice([&](int64_t lo, int64_t hi) {
            float* __restrict pa = a.get();
            const float* __restrict pb = b.get();
            const float* __restrict pc = c.get();
            for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + 3.0f * pc[i];
        });
        best = std::max(best, 3.0 * static_cast<double>(bytesPerArray) / secondsSince(t0));
    }
    volatile float sink = a[n / 2];  // keep the stores observable
    (void)sink;
    return best;
}

BenchReport runBenchmark(const BenchOptions& o, const std::function<void(const std::string&)>& log) {
    BenchReport report;
    report.modelDir = ensureModel(o, log);
    report.threads = at::get_num_threads();
    report.libtorch = libtorchVersion() + " (" + libtorchLibraryPath() + ")";
    report.cpuFeatures = cpuVectorFeatures();
    log("measuring memory bandwidth (triad)");
    report.bandwidthBytesPerSecond = measureTriadBandwidth();

    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < o.promptTokens; ++i) prompt.push_back((i * 7919 + 13) % 5000 + 300);
    for (auto dtype : o.dtypes) {
        log("loading the model in " + dtypeName(dtype));
        Transformer model = Transformer::load(report.modelDir, dtype, o.device);
        Generator gen(model);
        BenchRow row;
        row.dtype = dtypeName(dtype);
        row.weightBytesPerToken = weightBytesPerDecodeStep(model);
        row.boundTokensPerSecond = report.bandwidthBytesPerSecond / row.weightBytesPerToken;

        {  // warm-up: first-touch allocation and kernel selection
            KvCache warm = model.newCache(64);
            gen.prefill(std::vector<int64_t>(prompt.begin(), prompt.begin() + 16), warm);
        }
        log("prefill " + std::to_string(o.promptTokens) + " tokens (" + row.dtype + ")");
        KvCache cache = model.newCache(o.promptTokens + o.decodeTokens + 1);
        auto t0 = Clock::now();
        torch::Tensor logits = gen.prefill(prompt, cache);
        row.prefillSeconds = secondsSince(t0);
        row.prefillTokensPerSecond = static_cast<double>(o.promptTokens) / row.prefillSeconds;

        log("decode " + std::to_string(o.decodeTokens) + " tokens (" + row.dtype + "), linear then mv kernels");
        row.decodeTokensPerSecond = decodeRate(model, cache, logits, o.decodeTokens);
        Numerics matrixVector;
        matrixVector.matrixVectorDecode = true;  // the same weight tensors, other decode kernels
        const Transformer fast(model.config(), model.weights(), dtype, o.device, matrixVector);
        row.decodeMatrixVectorTokensPerSecond = decodeRate(fast, cache, logits, o.decodeTokens);
        report.rows.push_back(row);
    }
    return report;
}

}  // namespace kvscope
