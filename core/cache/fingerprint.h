// SPDX-License-Identifier: MIT
#pragma once
// Fingerprints: SHA-256 (OpenSSL) of raw bytes, printed as lowercase hex. Identical bytes give the
// identical fingerprint in every run and process; any changed bit changes it.
//
//   tensor      sha256(contiguous CPU bytes of the tensor)
//   token ids   sha256(ids as little-endian int64)
//   cache       per layer: sha256(K bytes), sha256(V bytes) of positions [0, length);
//               overall: sha256 of "kvscope-cache-v1", the dtype name, and every layer's K and V
//               digests (32 raw bytes each, layer order, K before V), then the ids digest
//   model       sha256 over the loaded weights: for each tensor its name, dtype, shape, bytes
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

class KvCache;

std::string sha256Hex(const void* data, std::size_t bytes);
std::string tensorFingerprint(const torch::Tensor& t);
std::string idsFingerprint(const std::vector<int64_t>& ids);
std::string fingerprintNamedTensors(const std::vector<std::pair<std::string, torch::Tensor>>& named);

struct CacheFingerprint {
    std::string overall;
    std::vector<std::string> keys;    // per layer
    std::vector<std::string> values;  // per layer
    std::string ids;
};
CacheFingerprint fingerprintCache(const KvCache& cache);

}  // namespace kvscope
