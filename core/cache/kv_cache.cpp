// SPDX-License-Identifier: MIT
#include "core/cache/kv_cache.h"

#include "core/model/config.h"
#include "core/util/error.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

namespace {
// Copies S rows of D elements a KV head into rows [at, at+S) of `to` [KV, capacity, D] (contiguous, on
// the CPU, the rows' dtype): row s of head h starts headStride * h + rowStride * s elements into `src`.
void copyRows(const char* src, int64_t headStride, int64_t rowStride, int64_t S, torch::Tensor& to, int64_t at) {
    const int64_t KV = to.size(0), capacity = to.size(1), D = to.size(2), element = to.element_size();
    auto* dst = static_cast<char*>(to.data_ptr());
    for (int64_t h = 0; h < KV; ++h)
        for (int64_t s = 0; s < S; ++s)
            std::memcpy(dst + (h * capacity + at + s) * D * element, src + (h * headStride + s * rowStride) * element,
                        static_cast<std::size_t>(D * element));
}

// Writes rows [0, S) of `from` [KV, S, D] at rows [at, at+S) of `to` [KV, capacity, D]. On the CPU,
// where each row's D elements are contiguous in the cache's dtype, row by row with memcpy: torch's
// copy_ of a decode step's two KV heads cost more than the copy, its code and bookkeeping evicted
// from the caches by the step's weight stream (docs/history/kernel-measurements.md, "Cache writes").
void writeRows(const torch::Tensor& from, torch::Tensor& to, int64_t at) {
    const int64_t KV = from.size(0), S = from.size(1), D = from.size(2);
    const bool rowsCopy = from.is_cpu() && to.is_cpu() && from.scalar_type() == to.scalar_type() &&
                          from.stride(2) == 1 && to.is_contiguous() && to.size(0) == KV && to.size(2) == D;
    if (!rowsCopy) {
        to.narrow(1, at, S).copy_(from);
        return;
    }
    copyRows(static_cast<const char*>(from.data_ptr()), from.stride(0), from.stride(1), S, to, at);
}
}  // namespace

KvCache::KvCache(int64_t numLayers, int64_t numKvHeads, int64_t headDim, torch::ScalarType dtype, torch::Device device,
                 int64_t initialCapacity)
    : numKvHeads_(numKvHeads), headDim_(headDim), capacity_(std::max<int64_t>(initialCapacity, 1)), dtype_(dtype),
      device_(device) {
    auto options = torch::TensorOptions().dtype(dtype).device(device);
    for (int64_t l = 0; l < numLayers; ++l) {
        keys_.push_back(torch::zeros({numKvHeads, capacity_, headDim}, options));
        values_.push_back(torch::zeros({numKvHeads, capacity_, headDim}, options));
    }
}

KvCache KvCache::forModel(const ModelConfig& config, torch::ScalarType dtype, torch::Device device,
                          int64_t initialCapacity) {
    return KvCache(config.numLayers, config.numKvHeads, config.headDim, dtype, device, initialCapacity);
}

void KvCache::checkLayer(int64_t layer) const {
    if (layer < 0 || layer >= numLayers())
        throw UsageError("KV cache has " + std::to_string(numLayers()) + " layers; layer " + std::to_string(layer) +
                         " requested");
}

void KvCache::reserve(int64_t totalLength) {
    if (totalLength <= capacity_) return;
    int64_t newCapacity = std::max<int64_t>(capacity_, 256);
    while (newCapacity < totalLength) newCapacity *= 2;
    const int64_t valid = length();
    for (auto* tensors : {&keys_, &values_}) {
        for (auto& t : *tensors) {
            torch::Tensor grown = torch::zeros({numKvHeads_, newCapacity, headDim_}, t.options());
            grown.narrow(1, 0, valid).copy_(t.narrow(1, 0, valid));
            t = grown;
        }
    }
    capacity_ = newCapacity;
}

void KvCache::write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v) {
    checkLayer(layer);
    const int64_t steps = k.size(1);
    if (length() + steps > capacity_) throw UsageError("KV cache write past capacity; call reserve() first");
    writeRows(k, keys_[layer], length());
    writeRows(v, values_[layer], length());
}

void KvCache::writeRow(int64_t layer, const void* k, const void* v) {
    checkLayer(layer);
    if (length() + 1 > capacity_) throw UsageError("KV cache write past capacity; call reserve() first");
    if (!device_.is_cpu()) throw UsageError("KvCache::writeRow() writes a CPU cache only");
    copyRows(static_cast<const char*>(k), headDim_, 0, 1, keys_[layer], length());
    copyRows(static_cast<const char*>(v), headDim_, 0, 1, values_[layer], length());
}

const void* KvCache::keysData(int64_t layer) const {
    checkLayer(layer);
    return keys_[layer].data_ptr();
}

const void* KvCache::valuesData(int64_t layer) const {
    checkLayer(layer);
    return values_[layer].data_ptr();
}

torch::Tensor KvCache::keys(int64_t layer, int64_t upTo) const {
    checkLayer(layer);
    return keys_[layer].narrow(1, 0, upTo);
}

torch::Tensor KvCache::values(int64_t layer, int64_t upTo) const {
    checkLayer(layer);
    return values_[layer].narrow(1, 0, upTo);
}

void KvCache::commit(const std::vector<int64_t>& newIds) { ids_.insert(ids_.end(), newIds.begin(), newIds.end()); }

KvCache KvCache::clone() const {
    KvCache copy(*this);  // shares tensors for now; replace them with deep copies below
    const int64_t cap = std::max<int64_t>(length(), 1);
    copy.capacity_ = cap;
    for (int64_t l = 0; l < numLayers(); ++l) {
        copy.keys_[l] = torch::zeros({numKvHeads_, cap, headDim_}, keys_[l].options());
        copy.values_[l] = torch::zeros({numKvHeads_, cap, headDim_}, values_[l].options());
        copy.keys_[l].narrow(1, 0, length()).copy_(layerKeys(l));
        copy.values_[l].narrow(1, 0, length()).copy_(layerValues(l));
    }
    if (nextLogits_.defined()) copy.nextLogits_ = nextLogits_.clone();
    return copy;
}

void KvCache::truncate(int64_t newLength) {
    if (newLength < 0 || newLength > length())
        throw UsageError("cannot truncate a " + std::to_string(length()) + "-token KV cache to " +
                         std::to_string(newLength));
    if (newLength == length()) return;
    ids_.resize(static_cast<std::size_t>(newLength));
    nextLogits_ = torch::Tensor();  // they belonged to the removed last position
    promptLength_ = std::min(promptLength_, newLength);
    // Stale slots past the new length are never read (attention reads [0, length)).
}

}  // namespace kvscope
