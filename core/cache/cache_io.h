// SPDX-License-Identifier: MIT
#pragma once
// KV caches on disk as .safetensors: tensors "layers.L.keys" and "layers.L.values", each
// [kv_heads, tokens, head_dim] in the cache dtype, plus "next_logits" [vocab] fp32 when known.
// Metadata (strings): format "kvscope-kv-cache", format_version "2", kvscope_version, dtype,
// construction, prompt_length, token_ids (JSON list), ids_fingerprint, model_fingerprint,
// fingerprint (the cache's overall fingerprint over K, V, dtype and ids, re-checked on load),
// next_logits_fingerprint, and metadata_seal (a hash over every field that decides how the cache may
// be used, so none of them can be edited unnoticed).
#include "core/cache/kv_cache.h"

#include <string>

namespace kvscope {

class Transformer;

void saveCache(const KvCache& cache, const std::string& path);  // atomic; bit-exact
// Reads and validates a cache file (FormatError naming the file and what is wrong). The cache lives
// on `device`.
KvCache loadCache(const std::string& path, torch::Device device = torch::kCPU);
// Same, and refuses a cache that `model` did not build (fingerprint, shape or dtype differ).
KvCache loadCacheFor(const std::string& path, const Transformer& model);
// The dtype a cache file was built in, from its checked metadata alone (no tensor is read).
// The build choices a saved cache records, read from its header alone (no tensor is read or hashed):
// commands that continue or rebuild a cache default to them.
struct SavedCacheBuild {
    torch::ScalarType dtype = torch::kFloat32;
    Kernels kernels = Kernels::Torch;
};
SavedCacheBuild savedCacheBuild(const std::string& path);

}  // namespace kvscope
