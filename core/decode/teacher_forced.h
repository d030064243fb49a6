// SPDX-License-Identifier: MIT
#pragma once
// Teacher forcing: a given continuation (another engine's sampled tokens) scored token by token, the
// tokens forced rather than chosen. How the cache is built decides the low bits, so the construction
// is part of the request:
//   prefill     one forward over prompt + continuation (a trainer's recomputation of the logprobs)
//   live        the prompt's prefill, then one decode step per forced token (the rollout's own view)
//   chunked:N   prompt + continuation in forwards of N tokens each (chunked prefill)
#include "core/decode/sampler.h"
#include "core/model/transformer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

struct ForcedReference {
    enum class Kind { Prefill, Live, Chunked };
    Kind kind = Kind::Prefill;
    int64_t chunk = 0;  // Chunked only: tokens per forward, > 0

    std::string name() const;                          // "prefill" | "live" | "chunked:N"
    static ForcedReference parse(const std::string&);  // UsageError naming the choices
};

// One score per continuation token: scores[i] is output[i] against the logits of the position before
// it. The prompt must not be empty (its last position predicts output[0]). Ids out of the model's
// vocabulary are refused (UsageError).
std::vector<ForcedScore> scoreContinuation(const Transformer& model, const std::vector<int64_t>& prompt,
                                           const std::vector<int64_t>& output, const ForcedReference& reference);

}  // namespace kvscope
