// SPDX-License-Identifier: MIT
#pragma once
// Generation as three separate steps, in the style of gpt-fast's generate.py:
//   prefill(prompt ids)  -> one forward over the whole prompt, logits of its last position
//   decodeOne(id)        -> one forward of a single token
//   decodeN(...)         -> choose, record, stop-check, decodeOne, repeat; a callback per token is
//                           the only progress and cancellation hook
// All of them run under a no-grad guard created in the calling thread.
#include "core/cache/kv_cache.h"
#include "core/decode/sampler.h"
#include "core/decode/stop_reason.h"
#include "core/model/transformer.h"

#include <functional>
#include <string>
#include <vector>

namespace kvscope {

struct StopRules {
    int64_t maxNewTokens = 64;
    std::vector<int64_t> eosIds;
    std::vector<std::string> stopStrings;  // checked on the decoded text of the generated tokens
    std::function<std::string(const std::vector<int64_t>&)> detokenize;  // needed for stopStrings
};

// The stop rules of every command and protocol: at most `maxNewTokens` new tokens, the model's EOS
// ids unless `ignoreEos`, and `stopStrings` checked on the text `detokenize` gives (required when
// there are stop strings).
StopRules stopRulesFor(const Transformer& model, int64_t maxNewTokens, bool ignoreEos = false,
                       std::vector<std::string> stopStrings = {},
                       std::function<std::string(const std::vector<int64_t>&)> detokenize = {});

struct GenerationResult {
    std::vector<int64_t> ids;       // generated token ids (the prompt excluded)
    std::vector<StepRecord> steps;  // one per generated id
    StopReason stopReason = StopReason::MaxNewTokens;
};

// Called after each chosen token; return false to stop (StopReason::Cancelled).
using TokenCallback = std::function<bool(const StepRecord& step, int64_t index)>;

class Generator {
public:
    static constexpr int64_t kUpfrontTokens = 1024;  // KV slots reserved beyond the prompt before decoding
    explicit Generator(const Transformer& model) : model_(model) {}

    torch::Tensor prefill(const std::vector<int64_t>& ids, KvCache& cache) const;  // [V] fp32
    torch::Tensor decodeOne(int64_t id, KvCache& cache) const;                     // [V] fp32

    // Decodes from `cache`, whose last position produced `logits`. The random draw for the token at
    // absolute position p uses (seed, p), so a continuation from any cache of the same prefix uses
    // the same numbers. The final chosen token is not fed back (the cache ends one token short).
    GenerationResult decodeN(KvCache& cache, torch::Tensor logits, const SamplingParams& sampling,
                             const StopRules& stops, const TokenCallback& onToken = {}) const;

    // Convenience: a fresh cache, prefill(prompt), decodeN. The cache is returned through `cacheOut`.
    GenerationResult generate(const std::vector<int64_t>& prompt, const SamplingParams& sampling,
                              const StopRules& stops, const TokenCallback& onToken = {},
                              KvCache* cacheOut = nullptr) const;

private:
    const Transformer& model_;
};

}  // namespace kvscope
