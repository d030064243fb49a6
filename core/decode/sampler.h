// SPDX-License-Identifier: MIT
#pragma once
// Choosing the next token from a logits row, and recording what the choice looked like.
//
// Greedy breaks ties towards the lowest token id. Sampling (temperature, then top-k, then top-p, as
// in Hugging Face) draws its uniform number from a counter-based hash of (seed, step), so a draw
// depends on nothing but those two numbers: two runs of the same thing are identical, and a replay
// that reaches the same position draws the same number.
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace kvscope {

struct SamplingParams {
    double temperature = 0.0;  // 0 = greedy
    int64_t topK = 0;          // 0 = no top-k truncation
    double topP = 1.0;         // 1 = no nucleus truncation
    std::uint64_t seed = 0;
    bool greedy() const { return temperature <= 0.0; }
};

struct TopEntry {
    int64_t id = 0;
    float logit = 0.0f;
};

// What one decoding step looked like. logprob and entropy are of the model's own distribution
// (softmax of the raw logits), independent of the sampling settings.
struct StepRecord {
    int64_t id = 0;
    double logprob = 0.0;
    double margin = 0.0;        // top-1 logit minus top-2 logit
    double entropy = 0.0;       // nats
    std::vector<TopEntry> top;  // the highest logits, best first (ties: lower id first)
};

// logits: [V] or [1, V], any float dtype, any device. `step` keys the random draw.
StepRecord chooseToken(const torch::Tensor& logits, const SamplingParams& params, std::uint64_t step,
                       int topToRecord = 5);

// A given token scored against a logits row, as teacher forcing sees it: its log-probability under
// the model's own distribution (chooseToken's formula, so a live replay of a kvscope trajectory gives
// its recorded logprobs bit for bit), the row's argmax (ties: lowest id), the top-1 minus top-2 logit,
// and the token's rank (1 = the argmax; tied logits rank by id, as greedy breaks ties).
struct ForcedScore {
    double logprob = 0.0;
    int64_t argmax = 0;
    double margin = 0.0;
    int64_t rank = 1;
};
ForcedScore scoreForcedToken(const torch::Tensor& logits, int64_t id);

// The uniform number in [0, 1) that sampling uses at (seed, step).
double uniformDraw(std::uint64_t seed, std::uint64_t step);

}  // namespace kvscope
