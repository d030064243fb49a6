// SPDX-License-Identifier: MIT
#pragma once
// The KV cache as a first-class object.
//
// Layout (batch size is always 1 in kvscope): for every layer l,
//   keys[l], values[l] : [num_kv_heads, capacity, head_dim]   in the compute dtype, on the model device
// Positions [0, length()) are valid; the rest is spare capacity. Keys are stored *after* RoPE, exactly
// what attention reads, so two caches can be compared bit for bit.
//
// Growth: capacity doubles (at least 256 slots) when a forward needs more room, so appending one token
// is amortised O(1) and never copies the whole cache per step. `reserve(n)` avoids regrowth entirely.
//
// Besides the tensors the cache records what it is: the integer token ids it was built from, how it
// was built (live / prefill / incremental / ...), where the prompt ended, the fingerprint of the
// model that built it, and the next-token logits its last forward produced. Widgets never see this
// class; they get value snapshots from core.
#include "core/model/numerics.h"

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

struct ModelConfig;

class KvCache {
public:
    KvCache() = default;
    KvCache(int64_t numLayers, int64_t numKvHeads, int64_t headDim, torch::ScalarType dtype, torch::Device device,
            int64_t initialCapacity = 256);
    static KvCache forModel(const ModelConfig& config, torch::ScalarType dtype, torch::Device device,
                            int64_t initialCapacity = 256);

    int64_t numLayers() const { return static_cast<int64_t>(keys_.size()); }
    int64_t numKvHeads() const { return numKvHeads_; }
    int64_t headDim() const { return headDim_; }
    int64_t length() const { return static_cast<int64_t>(ids_.size()); }
    int64_t capacity() const { return capacity_; }
    torch::ScalarType dtype() const { return dtype_; }
    torch::Device device() const { return device_; }

    const std::vector<int64_t>& ids() const { return ids_; }
    const std::string& construction() const { return construction_; }
    void setConstruction(std::string name) { construction_ = std::move(name); }
    int64_t promptLength() const { return promptLength_; }
    void setPromptLength(int64_t n) { promptLength_ = n; }
    // The kernels that computed it (`--kernels`): a cache is continued only with the same ones.
    Kernels kernels() const { return kernels_; }
    void setKernels(Kernels kernels) { kernels_ = kernels; }
    const std::string& modelFingerprint() const { return modelFingerprint_; }
    void setModelFingerprint(std::string fp) { modelFingerprint_ = std::move(fp); }
    // fp32 [vocab] logits that the forward which wrote the last position produced, i.e. the
    // distribution of the next token. Undefined when the cache was spliced or truncated: a
    // continuation then re-feeds the last token (see constructions.h).
    const torch::Tensor& nextLogits() const { return nextLogits_; }
    void setNextLogits(torch::Tensor logits) { nextLogits_ = std::move(logits); }

    // --- used by the forward pass, in this order for a step of `ids.size()` new tokens ---
    void reserve(int64_t totalLength);  // grow (amortised doubling) so `totalLength` positions fit
    // Writes K,V [num_kv_heads, S, head_dim] of layer `layer` at positions [length(), length()+S).
    void write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);
    // Views of positions [0, upTo) of one layer: [num_kv_heads, upTo, head_dim] (no copy).
    torch::Tensor keys(int64_t layer, int64_t upTo) const;
    torch::Tensor values(int64_t layer, int64_t upTo) const;
    // write() of one position without tensors (a decode step on rows): k, v [num_kv_heads, head_dim]
    // contiguous in the cache's dtype, into a CPU cache.
    void writeRow(int64_t layer, const void* k, const void* v);
    // The storage of one layer's keys or values, [num_kv_heads, capacity, head_dim] contiguous on
    // the CPU, for a decode step that reads it in place (Transformer's decode on rows).
    const void* keysData(int64_t layer) const;
    const void* valuesData(int64_t layer) const;
    // After every layer has written: the new ids become part of the cache.
    void commit(const std::vector<int64_t>& newIds);

    // --- whole-cache operations ---
    KvCache clone() const;  // deep copy of the valid positions, same provenance
    void truncate(int64_t newLength);  // forget positions >= newLength
    // Views of the valid part of one layer: [num_kv_heads, length, head_dim].
    torch::Tensor layerKeys(int64_t layer) const { return keys(layer, length()); }
    torch::Tensor layerValues(int64_t layer) const { return values(layer, length()); }

private:
    void checkLayer(int64_t layer) const;

    int64_t numKvHeads_ = 0;
    int64_t headDim_ = 0;
    int64_t capacity_ = 0;
    torch::ScalarType dtype_ = torch::kFloat32;
    torch::Device device_ = torch::kCPU;
    std::vector<torch::Tensor> keys_;  // per layer [num_kv_heads, capacity, head_dim]
    std::vector<torch::Tensor> values_;  // per layer [num_kv_heads, capacity, head_dim]
    std::vector<int64_t> ids_;  // the token ids at positions [0, length)
    std::string construction_ = "live";
    int64_t promptLength_ = 0;
    std::string modelFingerprint_;
    Kernels kernels_ = Kernels::Torch;
    torch::Tensor nextLogits_;  // [vocab] fp32, or undefined
};

}  // namespace kvscope
