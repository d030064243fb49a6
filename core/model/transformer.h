// SPDX-License-Identifier: MIT
#pragma once
// The decoder-only transformer shared by Qwen2 / Qwen2.5, Llama 2/3 and Qwen3, with Hugging Face
// semantics (see transformer.cpp, which reads top to bottom). Batch size is always 1: a sequence is
// a list of integer token ids and activations are [seq, hidden]. Training packs several sequences
// into that one row instead (forwardPacked), so there is no second copy of the model for it.
#include "core/cache/kv_cache.h"
#include "core/model/config.h"
#include "core/kernels/invariant.h"  // LinearOrder
#include "core/model/numerics.h"

#include <torch/types.h>
#include <torch/utils.h>  // NoGradGuard

#include <memory>
#include <string>
#include <vector>

namespace kvscope {

struct LayerWeights {
    torch::Tensor inputNorm;       // [hidden]
    torch::Tensor wq, bq;          // [heads*head_dim, hidden], [heads*head_dim] (bq undefined without bias)
    torch::Tensor wk, bk;          // [kv_heads*head_dim, hidden], [kv_heads*head_dim]
    torch::Tensor wv, bv;          // [kv_heads*head_dim, hidden], [kv_heads*head_dim]
    torch::Tensor qNorm, kNorm;    // [head_dim] (Qwen3 only)
    torch::Tensor wo, bo;          // [hidden, heads*head_dim], [hidden] (bo: Llama/Qwen3 attention_bias)
    torch::Tensor postNorm;        // [hidden]
    torch::Tensor wGate, wUp;      // [intermediate, hidden]
    torch::Tensor wDown;           // [hidden, intermediate]
};

struct Weights {
    torch::Tensor embed;              // [vocab, hidden]
    std::vector<LayerWeights> layers;
    torch::Tensor finalNorm;          // [hidden]
    torch::Tensor lmHead;             // [vocab, hidden]; the same tensor as `embed` when tied
};

// Receives intermediate values of a forward pass (for the op-level divergence locator). Each call
// gets the op name ("q_proj", "rope_q", "scores", ...), its output, and which axis of that output
// is the sequence (new-token) axis; layer is -1 outside blocks.
class ForwardObserver {
public:
    virtual ~ForwardObserver() = default;
    virtual void onOp(int64_t layer, const char* op, const torch::Tensor& value, int64_t seqAxis) = 0;
};

enum class Logits { Last, All };

struct LoadReport {
    std::vector<std::string> unusedTensors;  // present in the checkpoint, not used by the model
};

// The order of the invariant kernels' bf16 linears: InvariantTiles the tile order, else the pair order.
inline kernels::LinearOrder linearOrderOf(Kernels kernels) {
    return kernels == Kernels::InvariantTiles ? kernels::LinearOrder::Tiles : kernels::LinearOrder::Pairs;
}

// The K/V of B sequences decoded together, left-padded as transformers' generate pads a batch:
// row b's first pads[b] positions are padding, never attended to.
struct BatchCache {
    std::vector<int64_t> pads;                // [B]
    std::vector<torch::Tensor> keys, values;  // per layer [B, KV, T, D]; T counts the pads
    int64_t rows() const;
    int64_t length() const;                                // T
    torch::Tensor rowKeys(int64_t layer, int64_t row) const;    // [KV, T - pads[row], D]: the row's own
    torch::Tensor rowValues(int64_t layer, int64_t row) const;  // [KV, T - pads[row], D]
};
// `prompts` left-padded to the longest with id 0 (masked, so any id does): the rows forwardBatch
// takes; `cache.pads` is set to each row's padding.
std::vector<std::vector<int64_t>> leftPad(const std::vector<std::vector<int64_t>>& prompts, BatchCache& cache);

class Transformer {
public:
    Transformer(ModelConfig config, Weights weights, torch::ScalarType dtype, torch::Device device,
                Numerics numerics = {});

    // Reads and validates DIR (config.json, safetensors) or FILE.gguf (dequantized as transformers
    // does) and converts weights to `dtype` on `device`.
    // fp16 on CPU is refused where libtorch has no fp16 matmul there (1.13; PyTorch 2.x has one).
    // numerics.mixed reads the final norm and lm_head in fp32, or rounds every weight to bf16.
    static Transformer load(const std::string& dir, torch::ScalarType dtype, torch::Device device,
                            LoadReport* report = nullptr, Numerics numerics = {});

    const ModelConfig& config() const { return config_; }
    torch::ScalarType dtype() const { return dtype_; }
    torch::Device device() const { return device_; }
    const Numerics& numerics() const { return numerics_; }
    bool invariant() const { return isInvariant(numerics_.kernels); }
    kernels::LinearOrder linearOrder() const { return linearOrderOf(numerics_.kernels); }
    const Weights& weights() const { return weights_; }
    // Whether a decode step that nobody observes runs on rows (the invariant kernels without a torch
    // op between them) rather than through the ops an observer sees: same bits either way.
    bool decodesOnRows() const { return decodesOnRows_; }
    // SHA-256 over every weight tensor as loaded (names, dtype, shape, bytes) and any non-default
    // numerics: identifies the model, the compute dtype and the kernels. Computed once, on first use.
    const std::string& fingerprint() const;
    KvCache newCache(int64_t capacity = 256) const;

    // Runs `ids` at positions [cache.length(), cache.length()+S) and appends their K/V to `cache`.
    // Returns fp32 logits: [1, vocab] for the last position, or [S, vocab] for all of them.
    // (On invariant kernels, Logits::Last without an observer computes the last layer past its K and
    // V for the last row only: the same cache and logits, less work.)
    torch::Tensor forward(const std::vector<int64_t>& ids, KvCache& cache, Logits which = Logits::Last,
                          ForwardObserver* observer = nullptr) const;

    // B rows of S new tokens each, computed together and appended to `cache` (cache.pads says where
    // each row's padding ends; pad positions may hold any id). Returns fp32 logits of each row's last
    // position, [B, vocab]. Torch kernels compute what transformers' batched eager forward computes
    // (its products over all B*S rows, attention over the padded keys); invariant kernels give each
    // row the bits it has alone. An observer sees the ops as [B*S, features].
    torch::Tensor forwardBatch(const std::vector<std::vector<int64_t>>& ids, BatchCache& cache,
                               ForwardObserver* observer = nullptr) const;

    // Training: independent sequences packed into one row. Sequence k occupies
    // ids[sequenceStarts[k], sequenceStarts[k+1]), attends only to itself and is rotated from
    // position 0, exactly as if it ran alone from an empty cache. Keeps no cache; returns fp32 logits
    // [S, vocab] that autograd can differentiate when the weights require grad.
    torch::Tensor forwardPacked(const std::vector<int64_t>& ids, const std::vector<int64_t>& sequenceStarts) const;

private:
    struct Span;  // where the new rows sit: positions, mask, and the cache they extend (if any)
    void checkIds(const std::vector<int64_t>& ids) const;
    torch::Tensor blocks(torch::Tensor x, const Span& span, ForwardObserver* observer) const;
    torch::Tensor head(torch::Tensor x, ForwardObserver* observer) const;
    // x + block, the residual add: torch's, or the kernels' (the same bits, kernels::add)
    torch::Tensor residual(const torch::Tensor& x, const torch::Tensor& block) const;
    // The attention block of x's rows: the K and V of all of them into the cache, the queries and
    // outputs of the last `queries` (all of them, but for Span::lastLayerOnLastRow on invariant kernels).
    torch::Tensor attention(int64_t layer, const torch::Tensor& x, const Span& span, int64_t queries,
                            ForwardObserver* observer) const;
    torch::Tensor invariantAttention(int64_t layer, const torch::Tensor& x, const Span& span, int64_t queries,
                                     ForwardObserver* observer) const;
    torch::Tensor attentionBatch(int64_t layer, const torch::Tensor& x, const torch::Tensor& positions,
                                 const torch::Tensor& hidden, BatchCache& cache, ForwardObserver* observer) const;
    torch::Tensor mlp(int64_t layer, const torch::Tensor& x, ForwardObserver* observer) const;
    torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
    torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) const;
    bool weightsFitRowDecode() const;
    torch::Tensor decodeOnRows(int64_t id, KvCache& cache) const;  // [1, vocab]; appends K/V, does not commit

    ModelConfig config_;
    Weights weights_;
    torch::ScalarType dtype_;
    torch::Device device_;
    Numerics numerics_;
    torch::Tensor invFreq_;  // [head_dim/2] fp32 rotary inverse frequencies (llama3-scaled if asked)
    bool decodesOnRows_ = false;  // invariant kernels, weights as decodeOnRows reads them
    struct FingerprintMemo;
    std::shared_ptr<FingerprintMemo> fingerprint_;
};

// Every weight of `w` with its Hugging Face tensor name, in checkpoint order (sizes w.layers to the
// config). lm_head is not listed: it is `embed` when tied, "lm_head.weight" otherwise. The one
// place that maps names to fields, for loading and for writing trained weights.
std::vector<std::pair<std::string, torch::Tensor*>> hfWeightSlots(const ModelConfig& config, Weights& w);

// Rotary embedding pieces, exposed for tests.
torch::Tensor ropeInverseFrequencies(const ModelConfig& config);                 // [head_dim/2] fp32
// x: [heads, S, head_dim]; rotates with positions [start, start+S) (rotate-half convention).
torch::Tensor applyRope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start);
// The same with explicit positions: [S] fp32 on invFreq's device.
torch::Tensor applyRopeAt(const torch::Tensor& x, const torch::Tensor& invFreq, const torch::Tensor& positions);
// HF RMSNorm: normalise in fp32, cast back, then scale by weight.
torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Whether this libtorch multiplies fp16 matrices on the CPU (PyTorch 2.x does, 1.13 does not).
bool cpuMultipliesFp16();
// Refuses fp16 on invariant kernels (they compute bf16 and fp32).
void checkKernelsTakeDtype(Kernels kernels, torch::ScalarType dtype);
// Refuses a mixed precision that does not apply to a model computing in `dtype`.
void checkMixedPrecision(MixedPrecision mixed, torch::ScalarType dtype);
torch::ScalarType parseDtype(const std::string& name);   // "fp32" | "bf16" | "fp16"
std::string dtypeName(torch::ScalarType dtype);          // inverse of parseDtype
torch::Device parseDevice(const std::string& name);      // "cpu" | "cuda" | "cuda:N"

}  // namespace kvscope
