// SPDX-License-Identifier: MIT
#include "core/cache/fingerprint.h"

#include "core/cache/kv_cache.h"
#include "core/model/transformer.h"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>

namespace kvscope {
namespace {

// Incremental SHA-256 over several buffers.
class Sha256 {
public:
    Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
            throw std::runtime_error("SHA-256 init failed");
    }
    void update(const void* data, std::size_t bytes) { EVP_DigestUpdate(ctx_.get(), data, bytes); }
    void update(const std::string& s) { update(s.data(), s.size()); }
    std::string rawDigest() {
        unsigned char out[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx_.get(), out, &len);
        return std::string(reinterpret_cast<char*>(out), len);
    }

private:
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

std::string toHex(const std::string& raw) {
    static const char* digits = "0123456789abcdef";
    std::string hex;
    for (unsigned char c : raw) hex += digits[c >> 4], hex += digits[c & 15];
    return hex;
}

std::string fromHex(const std::string& hex) {
    std::string raw;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return raw;
}

torch::Tensor cpuContiguous(const torch::Tensor& t) { return t.to(torch::kCPU).contiguous(); }

}  // namespace

std::string sha256Hex(const void* data, std::size_t bytes) {
    Sha256 h;
    h.update(data, bytes);
    return toHex(h.rawDigest());
}

std::string tensorFingerprint(const torch::Tensor& t) {
    torch::Tensor c = cpuContiguous(t);
    return sha256Hex(c.data_ptr(), static_cast<std::size_t>(c.numel() * c.element_size()));
}

std::string idsFingerprint(const std::vector<int64_t>& ids) {
    std::string bytes;
    for (int64_t id : ids)
        for (int i = 0; i < 8; ++i) bytes += static_cast<char>(static_cast<std::uint64_t>(id) >> (8 * i));
    return sha256Hex(bytes.data(), bytes.size());
}

std::string fingerprintNamedTensors(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
    Sha256 h;
    for (const auto& [name, t] : named) {
        torch::Tensor c = cpuContiguous(t);
        std::string header = name + "|" + c10::toString(c.scalar_type()) + "|";
        for (auto d : c.sizes()) header += std::to_string(d) + ",";
        h.update(header);
        h.update(c.data_ptr(), static_cast<std::size_t>(c.numel() * c.element_size()));
    }
    return toHex(h.rawDigest());
}

CacheFingerprint fingerprintCache(const KvCache& cache) {
    CacheFingerprint fp;
    fp.ids = idsFingerprint(cache.ids());
    Sha256 overall;
    overall.update(std::string("kvscope-cache-v1|") + dtypeName(cache.dtype()) + "|");
    for (int64_t l = 0; l < cache.numLayers(); ++l) {
        fp.keys.push_back(tensorFingerprint(cache.layerKeys(l)));
        fp.values.push_back(tensorFingerprint(cache.layerValues(l)));
        overall.update(fromHex(fp.keys.back()));
        overall.update(fromHex(fp.values.back()));
    }
    overall.update(fromHex(fp.ids));
    fp.overall = toHex(overall.rawDigest());
    return fp;
}

}  // namespace kvscope
