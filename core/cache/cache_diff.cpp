// SPDX-License-Identifier: MIT
#include "core/cache/cache_diff.h"

#include "core/cache/kv_cache.h"
#include "core/util/error.h"

#include <chrono>

namespace kvscope {
namespace {

// Same-width integer view, so "differing" means different bits (-0 vs +0 and NaN payloads count).
torch::Tensor bits(const torch::Tensor& t) {
    switch (t.element_size()) {
    case 2: return t.view(torch::kInt16);
    case 4: return t.view(torch::kInt32);
    default: return t.view(torch::kInt64);
    }
}

template <typename T>
void append(std::vector<T>& out, const torch::Tensor& t) {
    torch::Tensor c = t.to(torch::kCPU).contiguous();
    out.insert(out.end(), c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

// Per (head, position) metrics of one layer's K or V; returns the layer summary.
KvMetrics compareLayer(const torch::Tensor& aRaw, const torch::Tensor& bRaw, DiffGrid& grid) {
    torch::Tensor a = aRaw.to(torch::kFloat32), b = bRaw.to(torch::kFloat32);  // [H, T, D]
    torch::Tensor d = (a - b).abs();
    torch::Tensor differing = bits(aRaw.contiguous()).ne(bits(bRaw.contiguous())).sum(-1).to(torch::kInt32);  // [H, T]
    torch::Tensor diffNorm = d.pow(2).sum(-1).sqrt(), refNorm = a.pow(2).sum(-1).sqrt();
    torch::Tensor rel = torch::where(diffNorm.eq(0), torch::zeros_like(diffNorm), diffNorm / refNorm);
    append<float>(grid.maxAbs, d.amax(-1));
    append<float>(grid.meanAbs, d.mean(-1));
    append<float>(grid.relL2, rel);
    append<int32_t>(grid.differing, differing);
    KvMetrics m;
    m.maxAbs = d.numel() ? d.max().item<double>() : 0.0;
    m.meanAbs = d.numel() ? d.mean().item<double>() : 0.0;
    const double total = d.pow(2).sum().sqrt().item<double>(), ref = a.pow(2).sum().sqrt().item<double>();
    m.relL2 = total == 0 ? 0.0 : total / ref;
    m.differing = differing.sum().item<int64_t>();
    return m;
}

}  // namespace

CacheDiff diffCaches(const KvCache& a, const KvCache& b, bool allowDifferentIds) {
    const auto t0 = std::chrono::steady_clock::now();
    if (a.numLayers() != b.numLayers() || a.numKvHeads() != b.numKvHeads() || a.headDim() != b.headDim())
        throw UsageError("cannot diff KV caches of different shape (layers/KV heads/head dim)");
    if (a.length() != b.length())
        throw UsageError("cannot diff KV caches of different length (" + std::to_string(a.length()) + " vs " +
                         std::to_string(b.length()) + " tokens)");
    if (a.dtype() != b.dtype()) throw UsageError("cannot diff KV caches of different dtype");
    if (!allowDifferentIds && a.ids() != b.ids())
        throw UsageError("the two KV caches were built from different token ids");

    CacheDiff diff;
    diff.layers = a.numLayers();
    diff.heads = a.numKvHeads();
    diff.positions = a.length();
    diff.headDim = a.headDim();
    for (int64_t l = 0; l < diff.layers; ++l) {
        LayerDiff layer;
        layer.layer = l;
        layer.keys = compareLayer(a.layerKeys(l), b.layerKeys(l), diff.keys);
        layer.values = compareLayer(a.layerValues(l), b.layerValues(l), diff.values);
        layer.bitExact = layer.keys.differing == 0 && layer.values.differing == 0;
        diff.bitExact = diff.bitExact && layer.bitExact;
        diff.perLayer.push_back(layer);
    }
    for (int64_t p = 0; p < diff.positions; ++p) diff.perPosition.push_back({p, 0, 0, 0});
    for (int64_t l = 0; l < diff.layers; ++l) {
        for (int64_t p = 0; p < diff.positions; ++p) {
            int64_t differing = 0;
            for (int64_t h = 0; h < diff.heads; ++h) {
                const auto i = diff.at(l, h, p);
                differing += diff.keys.differing[i] + diff.values.differing[i];
                auto& pos = diff.perPosition[p];
                pos.maxAbs = std::max(
                    {pos.maxAbs, static_cast<double>(diff.keys.maxAbs[i]), static_cast<double>(diff.values.maxAbs[i])});
            }
            diff.perPosition[p].differing += differing;
            if (differing) {
                ++diff.perPosition[p].layersDiffering;
                if (!diff.firstDifference) diff.firstDifference = std::make_pair(l, p);
            }
        }
    }
    diff.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return diff;
}

}  // namespace kvscope
