// SPDX-License-Identifier: MIT
#pragma once
// Ways to build a KV cache over the same integer token ids. Each one is a *schedule*: the sizes of
// the consecutive chunks of ids fed to the model, one forward per chunk.
//
//   prefill          [T]                  one forward over every token (how a replay is usually built)
//   incremental:K    [K, 1, 1, ..., 1]    K tokens at once, then one at a time (K = 0: all one at a time);
//                                         with K = the prompt length this mirrors live generation
//   chunked:N        [N, N, ..., rest]    prefill in chunks of N
//   live             [P, 1, 1, ..., 1]    the cache a greedy decode retains: prompt in one forward,
//                                         then each generated token fed back as it is chosen
//
// The cache records its construction name, prompt length, model fingerprint, and the next-token
// logits of its last forward; continuing decodes from a clone so the source stays intact.
#include "core/cache/kv_cache.h"
#include "core/decode/generator.h"
#include "core/model/transformer.h"

#include <string>
#include <vector>

namespace kvscope {

struct Construction {
    enum class Kind { Live, Prefill, Incremental, Chunked };
    Kind kind = Kind::Prefill;
    int64_t size = -1;  // K for incremental (-1: the prompt length), N for chunked

    // "live", "prefill", "incremental", "incremental:K", "chunked:N"; UsageError otherwise.
    static Construction parse(const std::string& text);
    std::string name() const;  // canonical text, with K resolved when known
    // Chunk sizes for `total` ids; `promptLength` resolves incremental's default K and live's P.
    std::vector<int64_t> schedule(int64_t total, int64_t promptLength) const;
};

// Builds a cache over `ids` with the given schedule. `lastStepObserver`, if set, watches only the
// forward that computes the final position (for the op-level locator).
KvCache buildCache(const Transformer& model, const std::vector<int64_t>& ids, const Construction& construction,
                   int64_t promptLength, ForwardObserver* lastStepObserver = nullptr);

// The live cache: prefill `prompt`, then greedily decode `generate` tokens, feeding each one back,
// so the cache holds prompt + generated ids and the logits of the token after them.
KvCache buildLiveCache(const Transformer& model, const std::vector<int64_t>& prompt, int64_t generate,
                       const SamplingParams& sampling = {});

// Continues decoding from a clone of `cache`. With next-token logits present they choose the first
// token; without (a spliced cache) the last position is dropped and its token fed again over the
// spliced history.
GenerationResult continueFrom(const Transformer& model, const KvCache& cache, const SamplingParams& sampling,
                              const StopRules& stops, const TokenCallback& onToken = {});

// Refuses (UsageError naming both) a cache that a different model or dtype built.
void requireCacheFromModel(const KvCache& cache, const Transformer& model);

}  // namespace kvscope
