// SPDX-License-Identifier: MIT
#include "core/decode/sampler.h"

#include "core/kernels/invariant.h"
#include "core/util/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace kvscope {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Higher logit first; equal logits: lower id first.
bool ranksBefore(const float* logits, int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

// The k best ids in rank order. A few (what a step records, a small top-k): one pass over the
// vocabulary keeping them sorted, instead of sorting V ids (a decode step calls this on 152k logits;
// the V-long id array alone was a 1.2 MB allocation per token). More: a partial sort.
std::vector<int64_t> highest(const float* logits, int64_t V, int64_t k) {
    auto before = [logits](int64_t a, int64_t b) { return ranksBefore(logits, a, b); };
    constexpr int64_t kOnePassUpTo = 64;
    if (k > kOnePassUpTo) {
        std::vector<int64_t> order(static_cast<std::size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        order.resize(static_cast<std::size_t>(k));
        return order;
    }
    std::vector<int64_t> best;
    best.reserve(static_cast<std::size_t>(k) + 1);
    for (int64_t id = 0; id < V; ++id) {
        if (static_cast<int64_t>(best.size()) == k && !before(id, best.back())) continue;
        auto at = best.end();
        while (at != best.begin() && before(id, *(at - 1))) --at;
        best.insert(at, id);
        if (static_cast<int64_t>(best.size()) > k) best.pop_back();
    }
    return best;
}

int64_t sampleIndex(const float* logits, int64_t V, const SamplingParams& p, std::uint64_t step) {
    const int64_t keep = (p.topK > 0 && p.topK < V) ? p.topK : V;
    const std::vector<int64_t> order = highest(logits, V, keep);

    // Probabilities at temperature T over the kept candidates (already in descending order).
    std::vector<double> probs(order.size());
    const double maxScaled = logits[order[0]] / p.temperature;
    double total = 0.0;
    for (std::size_t i = 0; i < order.size(); ++i)
        total += probs[i] = std::exp(logits[order[i]] / p.temperature - maxScaled);
    for (auto& x : probs) x /= total;

    // Nucleus: the smallest prefix whose mass reaches top_p (always at least one token).
    std::size_t cut = probs.size();
    if (p.topP < 1.0) {
        double mass = 0.0;
        for (std::size_t i = 0; i < probs.size(); ++i) {
            mass += probs[i];
            if (mass >= p.topP) {
                cut = i + 1;
                break;
            }
        }
    }
    const double kept = std::accumulate(probs.begin(), probs.begin() + cut, 0.0);
    const double target = uniformDraw(p.seed, step) * kept;
    double running = 0.0;
    for (std::size_t i = 0; i < cut; ++i) {
        running += probs[i];
        if (target < running) return order[i];
    }
    return order[cut - 1];
}

// sum_i e^(l_i - max) and sum_i e^(l_i - max) (l_i - max): the exps by the kernels' own exp (within
// 2 ulp, vectorised; std::exp in double took a few percent of a decode step: docs/history/
// kernel-measurements.md, "Sampler sums"), summed in double in four interleaved partial sums.
std::pair<double, double> expSums(const float* logits, int64_t V, float maxLogit) {
    constexpr int64_t kBlock = 4096;
    float e[kBlock];
    double sums[4] = {}, weighted[4] = {};
    const kernels::KernelPath& path = kernels::kernelPath(kernels::bestIsa());
    for (int64_t b = 0; b < V; b += kBlock) {
        const int64_t n = std::min(kBlock, V - b);
        path.exps(logits + b, maxLogit, e, n);
        for (int64_t i = 0; i < n; ++i) {
            sums[i % 4] += e[i];
            weighted[i % 4] += static_cast<double>(e[i]) * (static_cast<double>(logits[b + i]) - maxLogit);
        }
    }
    return {(sums[0] + sums[1]) + (sums[2] + sums[3]), (weighted[0] + weighted[1]) + (weighted[2] + weighted[3])};
}

}  // namespace

double uniformDraw(std::uint64_t seed, std::uint64_t step) {
    std::uint64_t bits = splitmix64(splitmix64(seed) ^ (step * 0xD1B54A32D192ED03ull));
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

namespace {

torch::Tensor flatLogits(const torch::Tensor& logits) {
    torch::Tensor flat = logits.detach().reshape({-1}).to(torch::kCPU, torch::kFloat32).contiguous();
    if (flat.numel() < 2) throw UsageError("need at least two logits to choose a token");
    return flat;
}

}  // namespace

ForcedScore scoreForcedToken(const torch::Tensor& logitsIn, int64_t id) {
    const torch::Tensor flat = flatLogits(logitsIn);
    const int64_t V = flat.numel();
    if (id < 0 || id >= V)
        throw UsageError("token id " + std::to_string(id) + " is outside the " + std::to_string(V) +
                         "-token vocabulary");
    const float* logits = flat.data_ptr<float>();
    const std::vector<int64_t> order = highest(logits, V, 2);
    const float maxLogit = logits[order[0]];
    ForcedScore s;
    s.logprob = static_cast<double>(logits[id]) - maxLogit - std::log(expSums(logits, V, maxLogit).first);
    s.argmax = order[0];
    s.margin = static_cast<double>(logits[order[0]]) - logits[order[1]];
    for (int64_t i = 0; i < V; ++i) s.rank += logits[i] > logits[id] || (logits[i] == logits[id] && i < id);
    return s;
}

StepRecord chooseToken(const torch::Tensor& logitsIn, const SamplingParams& params, std::uint64_t step,
                       int topToRecord) {
    const torch::Tensor flat = flatLogits(logitsIn);
    const int64_t V = flat.numel();
    const float* logits = flat.data_ptr<float>();

    const int64_t recordCount = std::max<int64_t>(2, std::min<int64_t>(topToRecord, V));
    const std::vector<int64_t> order = highest(logits, V, recordCount);

    // Log-sum-exp for logprob and entropy of the model's own distribution. The maximum is the best
    // id's logit (a pass of its own cost time: the same section).
    const float maxLogit = logits[order[0]];
    const auto [sumExp, sumExpLogit] = expSums(logits, V, maxLogit);
    const double logZ = std::log(sumExp);

    StepRecord r;
    r.id = params.greedy() ? order[0] : sampleIndex(logits, V, params, step);
    r.logprob = static_cast<double>(logits[r.id]) - maxLogit - logZ;
    r.margin = static_cast<double>(logits[order[0]]) - logits[order[1]];
    r.entropy = logZ - sumExpLogit / sumExp;
    for (int64_t i = 0; i < std::min<int64_t>(topToRecord, V); ++i) r.top.push_back({order[i], logits[order[i]]});
    return r;
}

}  // namespace kvscope
