// SPDX-License-Identifier: MIT
#include "support/reference_model.h"

#include "core/model/checkpoint.h"

#include <cmath>
#include <map>

namespace kvscope::test {
namespace {

using Vec = std::vector<double>;

struct RefWeights {
    const Checkpoint& ck;
    std::map<std::string, Vec> cache;
    const Vec& get(const std::string& name) {
        auto it = cache.find(name);
        if (it != cache.end()) return it->second;
        torch::Tensor t = ck.read(name, torch::kFloat64).contiguous();
        return cache[name] = Vec(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
};

// y[o] = sum_i W[o][i] x[i] (+ b[o]);  W is [out, in] row-major.
Vec matvec(const Vec& w, const Vec& x, std::size_t out, const Vec* bias = nullptr) {
    const std::size_t in = x.size();
    Vec y(out, 0.0);
    for (std::size_t o = 0; o < out; ++o) {
        double s = bias ? (*bias)[o] : 0.0;
        for (std::size_t i = 0; i < in; ++i) s += w[o * in + i] * x[i];
        y[o] = s;
    }
    return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps, std::size_t offset = 0, std::size_t n = 0) {
    if (n == 0) n = x.size();
    double ss = 0;
    for (std::size_t i = 0; i < n; ++i) ss += x[offset + i] * x[offset + i];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    Vec y(n);
    for (std::size_t i = 0; i < n; ++i) y[i] = x[offset + i] * scale * w[i];
    return y;
}

double invFrequency(const ModelConfig& c, std::size_t i) {
    const double base = 1.0 / std::pow(c.ropeTheta, 2.0 * static_cast<double>(i) / static_cast<double>(c.headDim));
    if (c.ropeScaling.type != RopeType::Llama3) return base;
    const auto& s = c.ropeScaling;
    const double wavelen = 2.0 * M_PI / base;
    const double lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
    const double highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
    if (wavelen < highWavelen) return base;                  // high frequency: unchanged
    if (wavelen > lowWavelen) return base / s.factor;        // low frequency: slowed down
    const double smooth =
        (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    return (1 - smooth) * base / s.factor + smooth * base;
}

// Rotates one head vector (rotate-half convention: pairs (i, i + D/2)).
void rope(double* v, std::size_t D, std::size_t pos, const ModelConfig& c) {
    const std::size_t half = D / 2;
    for (std::size_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(pos) * invFrequency(c, i);
        const double x1 = v[i], x2 = v[i + half];
        v[i] = x1 * std::cos(a) - x2 * std::sin(a);
        v[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
}

}  // namespace

std::vector<std::vector<double>> referenceLogits(const std::string& dir, const std::vector<int64_t>& ids) {
    Checkpoint ck = Checkpoint::open(dir);
    const ModelConfig& c = ck.config();
    RefWeights W{ck, {}};
    const std::size_t S = ids.size(), H = c.hiddenSize, D = c.headDim, Q = c.numHeads, KV = c.numKvHeads;
    const std::size_t I = c.intermediateSize, V = c.vocabSize, G = Q / KV;

    std::vector<Vec> x(S, Vec(H));
    const Vec& emb = W.get("model.embed_tokens.weight");
    for (std::size_t s = 0; s < S; ++s)
        for (std::size_t h = 0; h < H; ++h) x[s][h] = emb[ids[s] * H + h];

    for (int64_t l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        auto bias = [&](const char* n) { return c.attentionBias ? &W.get(p + n) : nullptr; };
        std::vector<Vec> q(S), k(S), v(S);
        for (std::size_t s = 0; s < S; ++s) {
            Vec h = rmsnorm(x[s], W.get(p + "input_layernorm.weight"), c.rmsNormEps);
            q[s] = matvec(W.get(p + "self_attn.q_proj.weight"), h, Q * D, bias("self_attn.q_proj.bias"));
            k[s] = matvec(W.get(p + "self_attn.k_proj.weight"), h, KV * D, bias("self_attn.k_proj.bias"));
            v[s] = matvec(W.get(p + "self_attn.v_proj.weight"), h, KV * D, bias("self_attn.v_proj.bias"));
            for (std::size_t hd = 0; hd < Q; ++hd) {
                if (c.qkNorm) {
                    Vec n = rmsnorm(q[s], W.get(p + "self_attn.q_norm.weight"), c.rmsNormEps, hd * D, D);
                    std::copy(n.begin(), n.end(), q[s].begin() + hd * D);
                }
                rope(&q[s][hd * D], D, s, c);
            }
            for (std::size_t hd = 0; hd < KV; ++hd) {
                if (c.qkNorm) {
                    Vec n = rmsnorm(k[s], W.get(p + "self_attn.k_norm.weight"), c.rmsNormEps, hd * D, D);
                    std::copy(n.begin(), n.end(), k[s].begin() + hd * D);
                }
                rope(&k[s][hd * D], D, s, c);
            }
        }
        for (std::size_t s = 0; s < S; ++s) {
            Vec attn(Q * D, 0.0);
            for (std::size_t hd = 0; hd < Q; ++hd) {
                const std::size_t kvh = hd / G;  // query head -> its KV head
                Vec scores(s + 1);
                double mx = -1e300;
                for (std::size_t t = 0; t <= s; ++t) {  // causal: only positions <= s
                    double dot = 0;
                    for (std::size_t d = 0; d < D; ++d) dot += q[s][hd * D + d] * k[t][kvh * D + d];
                    scores[t] = dot / std::sqrt(static_cast<double>(D));
                    mx = std::max(mx, scores[t]);
                }
                double z = 0;
                for (auto& sc : scores) z += (sc = std::exp(sc - mx));
                for (std::size_t t = 0; t <= s; ++t)
                    for (std::size_t d = 0; d < D; ++d) attn[hd * D + d] += scores[t] / z * v[t][kvh * D + d];
            }
            Vec o = matvec(W.get(p + "self_attn.o_proj.weight"), attn, H,
                           c.outputBias ? &W.get(p + "self_attn.o_proj.bias") : nullptr);
            for (std::size_t h = 0; h < H; ++h) x[s][h] += o[h];
            Vec h2 = rmsnorm(x[s], W.get(p + "post_attention_layernorm.weight"), c.rmsNormEps);
            Vec gate = matvec(W.get(p + "mlp.gate_proj.weight"), h2, I);
            Vec up = matvec(W.get(p + "mlp.up_proj.weight"), h2, I);
            for (std::size_t i = 0; i < I; ++i) gate[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
            Vec down = matvec(W.get(p + "mlp.down_proj.weight"), gate, H);
            for (std::size_t h = 0; h < H; ++h) x[s][h] += down[h];
        }
    }
    const Vec& head = c.tieWordEmbeddings ? W.get("model.embed_tokens.weight") : W.get("lm_head.weight");
    std::vector<Vec> logits;
    for (std::size_t s = 0; s < S; ++s)
        logits.push_back(matvec(head, rmsnorm(x[s], W.get("model.norm.weight"), c.rmsNormEps), V));
    return logits;
}

}  // namespace kvscope::test
