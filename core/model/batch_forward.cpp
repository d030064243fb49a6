// SPDX-License-Identifier: MIT
// Transformer's batched forward: B sequences left-padded to one length and computed together, as
// transformers' generate pads and computes a batch. Shapes as in transformer.cpp, plus B = rows of
// the batch and T = the padded cache length (pads included). Each row's positions count its own
// tokens from 0, so a row's RoPE angles are those it has alone; what can differ from alone is what
// the batch changes: products over B*S rows instead of S, attention over T padded keys.
#include "core/model/transformer.h"

#include "core/kernels/invariant_ops.h"
#include "core/util/error.h"

#include <algorithm>
#include <limits>

namespace kvscope {

namespace {

// The batch's ops reach an observer as [B*S, features]: row b's positions are rows b*S .. b*S+S-1.
void observe(ForwardObserver* o, int64_t layer, const char* op, const torch::Tensor& t) {
    if (o) o->onOp(layer, op, t, 0);
}

// [B, heads, S, D] rotated row by row at each row's positions ([B, S] fp32).
torch::Tensor ropeRows(const torch::Tensor& x, const torch::Tensor& invFreq, const torch::Tensor& positions) {
    std::vector<torch::Tensor> rows;
    for (int64_t b = 0; b < x.size(0); ++b) rows.push_back(applyRopeAt(x[b], invFreq, positions[b]));
    return torch::stack(rows);                                                            // [B, heads, S, D]
}

// k, v: [B, KV, S, D] appended to the layer's [B, KV, T, D].
void append(BatchCache& cache, std::size_t layer, const torch::Tensor& k, const torch::Tensor& v) {
    const bool first = !cache.keys[layer].defined();
    cache.keys[layer] = first ? k.contiguous() : torch::cat({cache.keys[layer], k}, 2);
    cache.values[layer] = first ? v.contiguous() : torch::cat({cache.values[layer], v}, 2);
}

}  // namespace

std::vector<std::vector<int64_t>> leftPad(const std::vector<std::vector<int64_t>>& prompts, BatchCache& cache) {
    std::size_t longest = 0;
    for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
    std::vector<std::vector<int64_t>> rows;
    cache.pads.clear();
    for (const auto& prompt : prompts) {
        std::vector<int64_t> row(longest - prompt.size(), 0);
        row.insert(row.end(), prompt.begin(), prompt.end());
        rows.push_back(std::move(row));
        cache.pads.push_back(static_cast<int64_t>(longest - prompt.size()));
    }
    return rows;
}

int64_t BatchCache::rows() const { return static_cast<int64_t>(pads.size()); }

int64_t BatchCache::length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }

torch::Tensor BatchCache::rowKeys(int64_t layer, int64_t row) const {
    const int64_t pad = pads[static_cast<std::size_t>(row)];
    return keys[static_cast<std::size_t>(layer)][row].narrow(1, pad, length() - pad);    // [KV, T - pad, D]
}

torch::Tensor BatchCache::rowValues(int64_t layer, int64_t row) const {
    const int64_t pad = pads[static_cast<std::size_t>(row)];
    return values[static_cast<std::size_t>(layer)][row].narrow(1, pad, length() - pad);  // [KV, T - pad, D]
}

torch::Tensor Transformer::forwardBatch(const std::vector<std::vector<int64_t>>& ids, BatchCache& cache,
                                        ForwardObserver* observer) const {
    const int64_t B = static_cast<int64_t>(ids.size());
    if (B == 0 || ids.front().empty()) throw UsageError("forwardBatch() needs at least one row of token ids");
    const int64_t S = static_cast<int64_t>(ids.front().size());
    for (const auto& row : ids) {
        if (static_cast<int64_t>(row.size()) != S) throw UsageError("forwardBatch(): rows of unequal length");
        checkIds(row);
    }
    if (cache.rows() != B) throw UsageError("forwardBatch(): the cache has another number of rows");
    if (!device_.is_cpu()) throw UsageError("the batched forward runs on the CPU");
    const int64_t start = cache.length(), T = start + S;
    const auto [fewest, most] = std::minmax_element(cache.pads.begin(), cache.pads.end());
    if (*fewest < 0 || (start == 0 && *most >= S))
        throw UsageError("forwardBatch(): each row's pads come first and leave it at least one token");
    if (T - *fewest > config_.maxPositionEmbeddings)
        throw UsageError("forwardBatch(): positions reach past the model's max_position_embeddings (" +
                         std::to_string(config_.maxPositionEmbeddings) + ")");
    if (cache.keys.empty()) cache.keys.resize(static_cast<std::size_t>(config_.numLayers));
    if (cache.values.empty()) cache.values.resize(static_cast<std::size_t>(config_.numLayers));

    // Each row's positions: its own tokens count from 0 (transformers' cumsum of the attention mask);
    // a pad's position is never read. Mask: a query sees the keys at or before it that are not pads.
    const torch::Tensor pads = torch::tensor(cache.pads, torch::kInt64).unsqueeze(1);    // [B, 1]
    const torch::Tensor queryAt = torch::arange(start, T, torch::kInt64).unsqueeze(0);   // [1, S]
    const torch::Tensor positions = (queryAt - pads).clamp_min(0).to(invFreq_.scalar_type());  // [B, S]
    const torch::Tensor keyAt = torch::arange(T, torch::kInt64).view({1, 1, T});          // [1, 1, T]
    const torch::Tensor hidden =
        ((keyAt > queryAt.unsqueeze(2)) | (keyAt < pads.unsqueeze(2))).unsqueeze(1);     // [B, 1, S, T]

    std::vector<int64_t> flat;
    for (const auto& row : ids) flat.insert(flat.end(), row.begin(), row.end());
    torch::Tensor x = weights_.embed.index_select(0, torch::tensor(flat, torch::kInt64));    // [B*S, H]
    for (int64_t l = 0; l < config_.numLayers; ++l) {
        torch::Tensor h = rmsNorm(x, weights_.layers[l].inputNorm);                       // [B*S, H]
        observe(observer, l, "input_norm", h);
        torch::Tensor a = attentionBatch(l, h, positions, hidden, cache, observer);       // [B*S, H]
        x = residual(x, a);
        observe(observer, l, "attn_residual", x);
        h = rmsNorm(x, weights_.layers[l].postNorm);                                      // [B*S, H]
        observe(observer, l, "post_norm", h);
        x = residual(x, mlp(l, h, observer));                                             // [B*S, H]
        observe(observer, l, "mlp_residual", x);
    }
    // The last position of every row: the logits generate reads.
    const torch::Tensor last = x.view({B, S, -1}).select(1, S - 1).contiguous();           // [B, H]
    return head(last, observer);                                                          // [B, V]
}

// The attention block over the batch. Torch kernels: transformers' eager attention on [B, heads,
// S, T] (projections over all B*S rows, one batched product per row and head over the padded keys,
// masked, softmax in fp32). Invariant kernels: the projections over all B*S rows, then each row's
// queries against its own keys, the pads left out; the pads' own outputs are zeros.
torch::Tensor Transformer::attentionBatch(int64_t l, const torch::Tensor& x, const torch::Tensor& positions,
                                          const torch::Tensor& hidden, BatchCache& cache,
                                          ForwardObserver* observer) const {
    const LayerWeights& lw = weights_.layers[l];
    const int64_t B = positions.size(0), S = positions.size(1);
    const int64_t Q = config_.numHeads, KV = config_.numKvHeads, D = config_.headDim, G = Q / KV;
    torch::Tensor q = project(x, lw.wq, lw.bq).view({B, S, Q, D});
    torch::Tensor k = project(x, lw.wk, lw.bk).view({B, S, KV, D});
    torch::Tensor v = project(x, lw.wv, lw.bv).view({B, S, KV, D});
    observe(observer, l, "q_proj", q.view({B * S, Q * D}));
    observe(observer, l, "k_proj", k.view({B * S, KV * D}));
    observe(observer, l, "v_proj", v.view({B * S, KV * D}));
    if (config_.qkNorm) {
        q = rmsNorm(q, lw.qNorm);
        k = rmsNorm(k, lw.kNorm);
    }
    const auto layer = static_cast<std::size_t>(l);
    const int64_t start = cache.keys[layer].defined() ? cache.keys[layer].size(2) : 0;  // this layer's, before
    if (invariant()) {
        torch::Tensor out = torch::zeros({B, S, Q * D}, x.options());                      // pads' rows stay 0
        for (int64_t b = 0; b < B; ++b) {
            const int64_t pad = cache.pads[static_cast<std::size_t>(b)];
            const int64_t first = start == 0 ? pad : 0;  // this call's first real row (pads come first)
            const int64_t real = S - first, at = start + first - pad;  // how many, and the first one's position
            const kernels::RopeAngles angles = kernels::ropeAngles(invFreq_, at, real);
            torch::Tensor kb = k[b].narrow(0, first, real);                               // [real, KV, D]
            kb.copy_(kernels::rope(kb, angles));  // into k: the cache keeps the rotated keys
            const torch::Tensor qb = kernels::rope(q[b].narrow(0, first, real), angles);  // [real, Q, D]
            const torch::Tensor vb = v[b].narrow(0, first, real);
            auto history = [&](const torch::Tensor& side, const torch::Tensor& fresh) {  // [KV, at + real, D]
                if (start == 0) return fresh.transpose(0, 1).contiguous();
                return torch::cat({side[b].narrow(1, pad, start - pad), fresh.transpose(0, 1)}, 1);
            };
            out[b]
                .narrow(0, first, real)
                .copy_(kernels::attention(qb, history(cache.keys[layer], kb), history(cache.values[layer], vb), at));
        }
        append(cache, layer, k.transpose(1, 2), v.transpose(1, 2));  // the pads' (unrotated) keys never read
        out = out.view({B * S, Q * D});                                                    // [B*S, Q*D]
        observe(observer, l, "attn_output", out);
        torch::Tensor projected = project(out, lw.wo, lw.bo);                             // [B*S, H]
        observe(observer, l, "o_proj", projected);
        return projected;
    }
    q = ropeRows(q.transpose(1, 2), invFreq_, positions);                                 // [B, Q, S, D]
    k = ropeRows(k.transpose(1, 2), invFreq_, positions);                                 // [B, KV, S, D]
    append(cache, layer, k, v.transpose(1, 2));
    const torch::Tensor& keys = cache.keys[layer];                                        // [B, KV, T, D]
    const torch::Tensor& values = cache.values[layer];
    auto repeat = [&](const torch::Tensor& t) {  // repeat_kv: [B, KV, T, D] -> [B, Q, T, D]
        if (G == 1) return t;
        return t.unsqueeze(2).expand({B, KV, G, t.size(2), D}).reshape({B, Q, t.size(2), D});
    };
    torch::Tensor scores =
        torch::matmul(q, repeat(keys).transpose(2, 3)) * std::pow(static_cast<double>(D), -0.5);  // [B, Q, S, T]
    scores = scores.masked_fill(hidden, -std::numeric_limits<float>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat32).to(x.scalar_type());  // [B, Q, S, T]
    // A pad's query sees no key: its softmax row is NaN; it feeds no real row, so it is zeroed.
    probs = probs.nan_to_num(0);
    torch::Tensor out = torch::matmul(probs, repeat(values));                             // [B, Q, S, D]
    out = out.transpose(1, 2).reshape({B * S, Q * D});                                    // [B*S, Q*D]
    observe(observer, l, "attn_output", out);
    torch::Tensor projected = project(out, lw.wo, lw.bo);                                 // [B*S, H]
    observe(observer, l, "o_proj", projected);
    return projected;
}

}  // namespace kvscope
