// SPDX-License-Identifier: MIT
// Transformer's decode step on rows: one token on the invariant kernels as blocks() and head()
// compute it, on rows each thread keeps, with no torch op between the kernels (decodeOnRows says
// why). Shapes as in transformer.cpp.
#include "core/model/transformer.h"

#include "core/cache/kv_cache.h"
#include "core/kernels/invariant_ops.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace kvscope {

// Whether every weight is a contiguous CPU tensor of the compute dtype (fp32 or bf16), as load()
// makes them: what decodeOnRows reads through raw pointers. Weights built otherwise decode through
// blocks().
bool Transformer::weightsFitRowDecode() const {
    if (!device_.is_cpu() || (dtype_ != torch::kFloat32 && dtype_ != torch::kBFloat16)) return false;
    auto fits = [&](const torch::Tensor& t) {
        return !t.defined() || (t.device().is_cpu() && t.scalar_type() == dtype_ && t.is_contiguous());
    };
    bool all = fits(weights_.embed) && fits(weights_.finalNorm) && fits(weights_.lmHead);
    for (const LayerWeights& w : weights_.layers)
        for (const torch::Tensor* t : {&w.inputNorm, &w.wq, &w.bq, &w.wk, &w.bk, &w.wv, &w.bv, &w.qNorm, &w.kNorm,
                                       &w.wo, &w.bo, &w.postNorm, &w.wGate, &w.wUp, &w.wDown})
            all = all && fits(*t);
    return all;
}

namespace {

// The rows a decode step on rows works in, kept by each thread from step to step: growing them is
// the only allocation, on the first step of a model's shape.
struct DecodeRows {
    std::vector<char> x, h, qkv, attention, o, gateUp, act, down;  // in the compute dtype
    std::vector<float> sums, queries, attended;                    // fp32: linears' sums, attention's in and out

    template <typename T>
    static T* sized(std::vector<T>& v, int64_t n) {
        if (v.size() < static_cast<std::size_t>(n)) v.resize(static_cast<std::size_t>(n));
        return v.data();
    }
};

// One projection of a step's linears: weight [out, in], bias [out] (null or undefined: none), its
// output row.
struct Into {
    const torch::Tensor& weight;
    const torch::Tensor* bias;
    char* out;
};

// One decode step: where its rows are, and the kernels' settings every op takes.
struct RowStep {
    const ModelConfig& config;
    bool bf16 = false;
    int64_t element = 0;  // bytes of the compute dtype
    kernels::Isa isa{};
    kernels::LinearOrder order{};
    char *x, *h, *q, *k, *v, *attention, *o, *gate, *up, *act, *down;
    float *queries, *attended, *sums;

    RowStep(const ModelConfig& c, bool bf16Rows, kernels::LinearOrder linearOrder, DecodeRows& rows)
        : config(c), bf16(bf16Rows), element(bf16Rows ? 2 : 4), isa(kernels::bestIsa()), order(linearOrder) {
        const int64_t H = c.hiddenSize, QD = c.numHeads * c.headDim, KVD = c.numKvHeads * c.headDim;
        const int64_t I = c.intermediateSize;
        x = DecodeRows::sized(rows.x, H * element);
        h = DecodeRows::sized(rows.h, H * element);
        q = DecodeRows::sized(rows.qkv, (QD + 2 * KVD) * element);
        k = q + QD * element;
        v = k + KVD * element;
        attention = DecodeRows::sized(rows.attention, QD * element);
        o = DecodeRows::sized(rows.o, H * element);
        gate = DecodeRows::sized(rows.gateUp, 2 * I * element);
        up = gate + I * element;
        act = DecodeRows::sized(rows.act, I * element);
        down = DecodeRows::sized(rows.down, H * element);
        queries = DecodeRows::sized(rows.queries, QD);
        attended = DecodeRows::sized(rows.attended, QD);
        sums = DecodeRows::sized(rows.sums, std::max({QD + 2 * KVD, 2 * I, H}));
    }

    // The projections of the row `in` ([width]) in one parallel region, as kernels::linears; fp32
    // without a bias needs no finishing, so its sums land in its output row.
    void linears(const char* in, int64_t width, std::initializer_list<Into> projections) const {
        std::vector<kernels::LinearInto> raw;
        float* nextSums = sums;
        for (const Into& p : projections) {
            const bool biased = p.bias && p.bias->defined(), sumsAreOutput = !bf16 && !biased;
            raw.push_back({p.weight.data_ptr(), bf16, p.weight.size(0), biased ? p.bias->data_ptr() : nullptr, bf16,
                           sumsAreOutput ? reinterpret_cast<float*>(p.out) : nextSums,
                           sumsAreOutput ? nullptr : p.out});
            if (!sumsAreOutput) nextSums += p.weight.size(0);
        }
        kernels::linearsInto(in, bf16, 1, width, raw, bf16, isa, order);
    }
    // `rows` rows of `width` from `in` normalised into `out` (which may be `in`: each row is read
    // whole before it is written).
    void norm(const char* in, const torch::Tensor& weight, char* out, int64_t rows, int64_t width) const {
        kernels::rmsNormInto(in, weight.data_ptr(), out, bf16, rows, width, config.rmsNormEps, isa);
    }
};

// invariantAttention() on the row h, for the token at position `start`: K and V into the cache,
// the projected output into o.
void attentionOnRows(const LayerWeights& lw, int64_t layer, const kernels::RopeAngles& angles, KvCache& cache,
                     const RowStep& r) {
    const ModelConfig& c = r.config;
    const int64_t Q = c.numHeads, KV = c.numKvHeads, D = c.headDim, start = cache.length();
    r.linears(r.h, c.hiddenSize, {{lw.wq, &lw.bq, r.q}, {lw.wk, &lw.bk, r.k}, {lw.wv, &lw.bv, r.v}});
    if (c.qkNorm) {
        r.norm(r.q, lw.qNorm, r.q, Q, D);
        r.norm(r.k, lw.kNorm, r.k, KV, D);
    }
    for (const auto& [rotated, heads] : {std::pair{r.q, Q}, {r.k, KV}})  // in place: pair by pair
        kernels::ropeInto(rotated, rotated, r.bf16, 1, heads, D, angles.cosines.data_ptr<float>(),
                          angles.sines.data_ptr<float>());
    cache.writeRow(layer, r.k, r.v);
    kernels::widenInto(r.q, r.bf16, r.queries, Q * D);
    kernels::attentionInto(r.queries, cache.keysData(layer), cache.valuesData(layer), r.bf16, cache.capacity() * D, 1,
                           start, Q, KV, D, r.attended, r.isa);
    kernels::roundInto(r.attended, r.attention, r.bf16, Q * D);
    r.linears(r.attention, Q * D, {{lw.wo, &lw.bo, r.o}});
}

// mlp() on the row h, into down.
void mlpOnRows(const LayerWeights& lw, const RowStep& r) {
    const ModelConfig& c = r.config;
    r.linears(r.h, c.hiddenSize, {{lw.wGate, nullptr, r.gate}, {lw.wUp, nullptr, r.up}});
    kernels::siluGateInto(r.gate, r.up, r.act, r.bf16, c.intermediateSize, r.isa);
    r.linears(r.act, c.intermediateSize, {{lw.wDown, nullptr, r.down}});
}

}  // namespace

// One token at position cache.length() on the invariant kernels, as blocks() and head() compute it,
// op for op: their kernel ops call the same raw functions (core/kernels/invariant_ops.h), so the bits
// are the same, and the tests that hold a live cache to a one-shot prefill's hold this step to them.
// What it leaves out is the torch op around each kernel (~40 a layer): their dispatch and allocation
// run on code and bookkeeping that the step's weight stream has evicted from the caches
// (docs/history/kernel-measurements.md, "Decode on rows").
torch::Tensor Transformer::decodeOnRows(int64_t id, KvCache& cache) const {
    thread_local DecodeRows rows;
    const RowStep r(config_, dtype_ == torch::kBFloat16, linearOrder(), rows);
    const int64_t H = config_.hiddenSize;
    const kernels::RopeAngles angles = kernels::ropeAngles(invFreq_, cache.length(), 1);  // [1, D/2] each
    std::memcpy(r.x, static_cast<const char*>(weights_.embed.data_ptr()) + id * H * r.element,
                static_cast<std::size_t>(H * r.element));
    for (int64_t l = 0; l < config_.numLayers; ++l) {
        const LayerWeights& lw = weights_.layers[l];
        r.norm(r.x, lw.inputNorm, r.h, 1, H);
        attentionOnRows(lw, l, angles, cache, r);
        kernels::addInto(r.x, r.o, r.x, r.bf16, H);
        r.norm(r.x, lw.postNorm, r.h, 1, H);
        mlpOnRows(lw, r);
        kernels::addInto(r.x, r.down, r.x, r.bf16, H);
    }
    r.norm(r.x, weights_.finalNorm, r.h, 1, H);
    // The lm_head as head() computes it: the pair order, its fp32 sums the logits.
    const int64_t V = weights_.lmHead.size(0);
    torch::Tensor logits = torch::empty({1, V}, torch::kFloat32);                          // [1, V]
    kernels::linearsInto(r.h, r.bf16, 1, H,
                         {{weights_.lmHead.data_ptr(), r.bf16, V, nullptr, false, logits.data_ptr<float>(), nullptr}},
                         false, r.isa, kernels::LinearOrder::Pairs);
    return logits;
}

}  // namespace kvscope
