// SPDX-License-Identifier: MIT
#include "core/cache/constructions.h"

#include "core/util/error.h"
#include "core/util/parse.h"

namespace kvscope {

Construction Construction::parse(const std::string& text) {
    Construction c;
    const auto colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    const bool hasSize = colon != std::string::npos;
    if (hasSize) {
        const std::string number = text.substr(colon + 1);
        const auto size = parseNonNegativeInt(number);
        if (!size) throw UsageError("construction '" + text + "': '" + number + "' is not a non-negative integer");
        c.size = *size;
    }
    if (kind == "prefill" && !hasSize)
        c.kind = Kind::Prefill;
    else if (kind == "live" && !hasSize)
        c.kind = Kind::Live;
    else if (kind == "incremental")
        c.kind = Kind::Incremental;
    else if (kind == "chunked" && hasSize && c.size > 0)
        c.kind = Kind::Chunked;
    else
        throw UsageError("unknown construction '" + text +
                         "' (expected live, prefill, incremental[:K] or chunked:N with N > 0)");
    return c;
}

std::string Construction::name() const {
    switch (kind) {
    case Kind::Live: return "live";
    case Kind::Prefill: return "prefill";
    case Kind::Incremental: return size < 0 ? "incremental" : "incremental:" + std::to_string(size);
    case Kind::Chunked: return "chunked:" + std::to_string(size);
    }
    return "?";
}

std::vector<int64_t> Construction::schedule(int64_t total, int64_t promptLength) const {
    std::vector<int64_t> chunks;
    int64_t first = 0, step = 1;
    switch (kind) {
    case Kind::Prefill: return {total};
    case Kind::Chunked:
        for (int64_t done = 0; done < total; done += size) chunks.push_back(std::min(size, total - done));
        return chunks;
    case Kind::Live: first = promptLength; break;
    case Kind::Incremental: first = size < 0 ? promptLength : size; break;
    }
    first = std::min(first, total);
    if (first > 0) chunks.push_back(first);
    for (int64_t done = first; done < total; done += step) chunks.push_back(1);
    return chunks;
}

KvCache buildCache(const Transformer& model, const std::vector<int64_t>& ids, const Construction& construction,
                   int64_t promptLength, ForwardObserver* lastStepObserver) {
    if (ids.empty()) throw UsageError("cannot build a cache over zero tokens");
    torch::NoGradGuard noGrad;
    const auto total = static_cast<int64_t>(ids.size());
    const auto chunks = construction.schedule(total, promptLength);
    KvCache cache = model.newCache(total);
    torch::Tensor logits;
    int64_t done = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        std::vector<int64_t> chunk(ids.begin() + done, ids.begin() + done + chunks[i]);
        const bool last = i + 1 == chunks.size();
        logits = model.forward(chunk, cache, Logits::Last, last ? lastStepObserver : nullptr);
        done += chunks[i];
    }
    Construction named = construction;
    if (named.kind == Construction::Kind::Incremental && named.size < 0) named.size = promptLength;
    cache.setConstruction(named.name());
    cache.setPromptLength(std::min(promptLength, total));
    cache.setModelFingerprint(model.fingerprint());
    cache.setNextLogits(logits.reshape({-1}));
    return cache;
}

KvCache buildLiveCache(const Transformer& model, const std::vector<int64_t>& prompt, int64_t generate,
                       const SamplingParams& sampling) {
    if (prompt.empty()) throw UsageError("the prompt has no tokens");
    Generator gen(model);
    KvCache cache = model.newCache(static_cast<int64_t>(prompt.size()) + generate);
    torch::Tensor logits = gen.prefill(prompt, cache);
    for (int64_t i = 0; i < generate; ++i) {
        const int64_t id = chooseToken(logits, sampling, static_cast<std::uint64_t>(cache.length())).id;
        logits = gen.decodeOne(id, cache);
    }
    cache.setConstruction("live");
    cache.setPromptLength(static_cast<int64_t>(prompt.size()));
    cache.setModelFingerprint(model.fingerprint());
    cache.setNextLogits(logits);
    return cache;
}

void requireCacheFromModel(const KvCache& cache, const Transformer& model) {
    if (cache.kernels() != model.numerics().kernels)
        throw UsageError("the KV cache was built with --kernels " + kernelsName(cache.kernels()) +
                         ", this model computes with --kernels " + kernelsName(model.numerics().kernels) +
                         " (a cache continues only on the kernels that built it)");
    if (cache.modelFingerprint() != model.fingerprint())
        throw UsageError("the KV cache was built by another model or dtype (cache model fingerprint " +
                         cache.modelFingerprint().substr(0, 16) + "..., this model in " + dtypeName(model.dtype()) +
                         ": " + model.fingerprint().substr(0, 16) + "...)");
    const ModelConfig& c = model.config();
    if (cache.numLayers() != c.numLayers || cache.numKvHeads() != c.numKvHeads || cache.headDim() != c.headDim ||
        cache.dtype() != model.dtype())
        throw UsageError("the KV cache's shape or dtype does not fit this model");
}

GenerationResult continueFrom(const Transformer& model, const KvCache& source, const SamplingParams& sampling,
                              const StopRules& stops, const TokenCallback& onToken) {
    requireCacheFromModel(source, model);
    if (source.length() == 0) throw UsageError("cannot continue from an empty KV cache");
    Generator gen(model);
    KvCache cache = source.clone();
    cache.reserve(cache.length() + std::min<int64_t>(stops.maxNewTokens, Generator::kUpfrontTokens) + 1);
    torch::Tensor logits = cache.nextLogits();
    if (!logits.defined()) {
        const int64_t last = cache.ids().back();
        cache.truncate(cache.length() - 1);
        logits = gen.decodeOne(last, cache);
    }
    return gen.decodeN(cache, logits, sampling, stops, onToken);
}

}  // namespace kvscope
