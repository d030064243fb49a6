// SPDX-License-Identifier: MIT
#include "core/cache/cache_io.h"
#include "core/util/json_ids.h"

#include "core/cache/constructions.h"
#include "core/cache/fingerprint.h"
#include "core/model/safetensors.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "core/util/parse.h"
#include "core/util/version.h"

#include <nlohmann/json.hpp>

#include <map>

namespace kvscope {
namespace {

std::string layerKey(int64_t l, const char* which) { return "layers." + std::to_string(l) + "." + which; }

// The K/V fingerprint covers data, dtype and ids; the seal covers every other metadata field that
// decides how a cache may be used (the model it belongs to, where the prompt ends, how it was built,
// whether it carries next-token logits), so editing any of them is detected on load.
std::string metadataSeal(const std::map<std::string, std::string>& meta) {
    std::string text = "kvscope-cache-metadata-v2";
    for (const char* key : {"dtype", "fingerprint", "ids_fingerprint", "model_fingerprint", "prompt_length",
                            "construction", "next_logits_fingerprint"}) {
        const auto it = meta.find(key);
        text += std::string("|") + key + "=" + (it == meta.end() ? std::string() : it->second);
    }
    // Sealed when present; caches written before --kernels existed lack it (and were torch-built),
    // so their seals stay valid.
    if (const auto it = meta.find("kernels"); it != meta.end()) text += "|kernels=" + it->second;
    return sha256Hex(text.data(), text.size());
}

using Metadata = std::map<std::string, std::string>;

const std::string& metadataField(const Metadata& meta, const std::string& path, const char* key) {
    const auto it = meta.find(key);
    if (it == meta.end()) throw FormatError(path + ": not a kvscope KV cache (metadata '" + key + "' missing)");
    return it->second;
}

// What every reader checks first: the format, its version, and that no sealed field was edited.
void checkCacheMetadata(const Metadata& meta, const std::string& path) {
    auto field = [&](const char* key) -> const std::string& { return metadataField(meta, path, key); };
    if (field("format") != "kvscope-kv-cache")
        throw FormatError(path + ": not a kvscope KV cache (metadata 'format' is not kvscope-kv-cache)");
    if (field("format_version") == "1")
        throw FormatError(
            path +
            ": KV cache format_version 1 (kvscope 0.2) has no metadata seal; rebuild the cache with this kvscope");
    if (field("format_version") != "2")
        throw FormatError(path + ": KV cache format_version " + field("format_version") +
                          " is not supported (expected 2)");
    if (metadataSeal(meta) != field("metadata_seal"))
        throw FormatError(
            path +
            ": KV cache metadata (model_fingerprint, prompt_length, construction, kernels, ids or "
            "logits fingerprint) was changed after the cache was written: it no longer matches metadata_seal");
}

Kernels savedKernels(const Metadata& meta, const std::string& path) {
    const auto it = meta.find("kernels");
    if (it == meta.end()) return Kernels::Torch;
    try {
        return parseKernels(it->second);
    } catch (const UsageError&) {
        throw FormatError(path + ": metadata 'kernels' is '" + it->second +
                          "' (expected torch, invariant or invariant-tiles)");
    }
}

}  // namespace

void saveCache(const KvCache& cache, const std::string& path) {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (int64_t l = 0; l < cache.numLayers(); ++l) {
        tensors.emplace_back(layerKey(l, "keys"), cache.layerKeys(l));
        tensors.emplace_back(layerKey(l, "values"), cache.layerValues(l));
    }
    const torch::Tensor logits =
        cache.nextLogits().defined() ? cache.nextLogits().to(torch::kFloat32) : torch::Tensor();
    if (logits.defined()) tensors.emplace_back("next_logits", logits);
    const CacheFingerprint fp = fingerprintCache(cache);
    std::map<std::string, std::string> meta = {
        {"format", "kvscope-kv-cache"},
        {"format_version", "2"},
        {"kvscope_version", kvscopeVersion()},
        {"dtype", dtypeName(cache.dtype())},
        {"construction", cache.construction()},
        {"kernels", kernelsName(cache.kernels())},
        {"prompt_length", std::to_string(cache.promptLength())},
        {"token_ids", nlohmann::json(cache.ids()).dump()},
        {"ids_fingerprint", fp.ids},
        {"model_fingerprint", cache.modelFingerprint()},
        {"fingerprint", fp.overall},
        {"next_logits_fingerprint", logits.defined() ? tensorFingerprint(logits) : ""}};
    meta["metadata_seal"] = metadataSeal(meta);
    writeSafetensors(path, tensors, meta);
}

KvCache loadCache(const std::string& path, torch::Device device) {
    SafetensorsFile file(path);
    const auto& meta = file.metadata();
    auto field = [&](const char* key) -> const std::string& { return metadataField(meta, path, key); };
    checkCacheMetadata(meta, path);
    const torch::ScalarType dtype = parseDtype(field("dtype"));
    std::vector<int64_t> ids;
    try {
        ids = tokenIdsFromJson(nlohmann::json::parse(field("token_ids")), path + ": metadata 'token_ids'");
    } catch (const nlohmann::json::exception&) {
        throw FormatError(path + ": metadata 'token_ids' is not a JSON list of integers");
    }
    int64_t layers = 0;
    while (file.find(layerKey(layers, "keys"))) ++layers;
    if (layers == 0) throw FormatError(path + ": no tensor 'layers.0.keys'");
    const auto& first = file.find(layerKey(0, "keys"))->shape;
    if (first.size() != 3) throw FormatError(path + ": 'layers.0.keys' must be [kv_heads, tokens, head_dim]");
    const std::vector<int64_t> shape = {first[0], static_cast<int64_t>(ids.size()), first[2]};

    KvCache cache(layers, shape[0], shape[2], dtype, device, std::max<int64_t>(shape[1], 1));
    for (int64_t l = 0; l < layers; ++l) {
        for (const char* which : {"keys", "values"}) {
            const SafetensorsEntry* e = file.find(layerKey(l, which));
            if (!e) throw FormatError(path + ": tensor '" + layerKey(l, which) + "' missing");
            if (e->shape != shape || scalarTypeFromSafetensors(e->dtype) != dtype)
                throw FormatError(path + ": tensor '" + layerKey(l, which) + "' is not " + dtypeName(dtype) + " [" +
                                  std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " +
                                  std::to_string(shape[2]) + "]");
        }
    }
    // Write every layer at once, as a forward over all positions would, then commit the ids.
    for (int64_t l = 0; l < layers; ++l)
        cache.write(l, file.read(layerKey(l, "keys")).to(device), file.read(layerKey(l, "values")).to(device));
    cache.commit(ids);
    cache.setConstruction(field("construction"));
    const auto promptLength = parseNonNegativeInt(field("prompt_length"));
    if (!promptLength) throw FormatError(path + ": metadata 'prompt_length' is not a non-negative integer");
    cache.setPromptLength(*promptLength);
    cache.setModelFingerprint(field("model_fingerprint"));
    cache.setKernels(savedKernels(meta, path));
    if (file.find("next_logits")) {
        torch::Tensor logits = file.read("next_logits", torch::kFloat32);
        if (tensorFingerprint(logits) != field("next_logits_fingerprint"))
            throw FormatError(path + ": 'next_logits' do not match their recorded fingerprint (file corrupted?)");
        cache.setNextLogits(logits.to(device));
    } else if (!field("next_logits_fingerprint").empty()) {
        throw FormatError(path + ": tensor 'next_logits' is missing though the metadata records its fingerprint");
    }
    if (fingerprintCache(cache).overall != field("fingerprint"))
        throw FormatError(path + ": KV cache data does not match its recorded fingerprint (file corrupted?)");
    return cache;
}

SavedCacheBuild savedCacheBuild(const std::string& path) {
    const SafetensorsFile file(path);  // the header only: no tensor is read or hashed
    checkCacheMetadata(file.metadata(), path);
    return {parseDtype(metadataField(file.metadata(), path, "dtype")), savedKernels(file.metadata(), path)};
}

KvCache loadCacheFor(const std::string& path, const Transformer& model) {
    KvCache cache = loadCache(path, model.device());
    try {
        requireCacheFromModel(cache, model);
    } catch (const UsageError& e) {
        throw UsageError(path + ": " + e.what());
    }
    return cache;
}

}  // namespace kvscope
