// SPDX-License-Identifier: MIT
#include "core/decode/teacher_forced.h"

#include "core/decode/generator.h"
#include "core/util/error.h"
#include "core/util/parse.h"

#include <algorithm>

namespace kvscope {

std::string ForcedReference::name() const {
    switch (kind) {
    case Kind::Prefill: return "prefill";
    case Kind::Live: return "live";
    case Kind::Chunked: return "chunked:" + std::to_string(chunk);
    }
    return "prefill";
}

ForcedReference ForcedReference::parse(const std::string& text) {
    if (text == "prefill") return {Kind::Prefill, 0};
    if (text == "live") return {Kind::Live, 0};
    const std::string prefix = "chunked:";
    if (text.rfind(prefix, 0) == 0) {
        const std::string digits = text.substr(prefix.size());
        const auto chunk = digits.size() <= 9 ? parseNonNegativeInt(digits) : std::nullopt;  // 9 digits: no overflow
        if (chunk && *chunk > 0) return {Kind::Chunked, *chunk};
    }
    throw UsageError("reference '" + text + "': expected prefill, live or chunked:N (N > 0 tokens per forward)");
}

namespace {

// Live: the prompt's prefill, then each forced token fed as a decode step, exactly as Generator
// decodes (the last token is scored, never fed).
std::vector<ForcedScore> scoreLive(const Transformer& model, const std::vector<int64_t>& prompt,
                                   const std::vector<int64_t>& output) {
    const Generator generator(model);
    KvCache cache = model.newCache();
    cache.reserve(static_cast<int64_t>(prompt.size() + output.size()));
    torch::Tensor logits = generator.prefill(prompt, cache);
    std::vector<ForcedScore> scores;
    for (std::size_t i = 0; i < output.size(); ++i) {
        scores.push_back(scoreForcedToken(logits, output[i]));
        if (i + 1 < output.size()) logits = generator.decodeOne(output[i], cache);
    }
    return scores;
}

// Prefill and chunked: prompt + output[:-1] in forwards of `chunk` tokens (all of them at once for a
// prefill), every position's logits kept; position P-1+i scores output[i].
std::vector<ForcedScore> scoreInForwards(const Transformer& model, const std::vector<int64_t>& prompt,
                                         const std::vector<int64_t>& output, std::size_t chunk) {
    std::vector<int64_t> ids = prompt;
    ids.insert(ids.end(), output.begin(), output.end() - 1);
    torch::NoGradGuard noGrad;
    KvCache cache = model.newCache();
    cache.reserve(static_cast<int64_t>(ids.size()));
    std::vector<ForcedScore> scores;
    for (std::size_t start = 0; start < ids.size(); start += chunk) {
        const std::size_t end = std::min(ids.size(), start + chunk);
        if (end < prompt.size()) {  // no continuation token is predicted inside this forward
            model.forward({ids.begin() + start, ids.begin() + end}, cache, Logits::Last);
            continue;
        }
        const torch::Tensor logits = model.forward({ids.begin() + start, ids.begin() + end}, cache, Logits::All);
        for (std::size_t p = std::max(start, prompt.size() - 1); p < end; ++p)
            scores.push_back(scoreForcedToken(logits[static_cast<int64_t>(p - start)], output[p + 1 - prompt.size()]));
    }
    return scores;
}

}  // namespace

std::vector<ForcedScore> scoreContinuation(const Transformer& model, const std::vector<int64_t>& prompt,
                                           const std::vector<int64_t>& output, const ForcedReference& reference) {
    if (prompt.empty()) throw UsageError("teacher forcing needs at least one prompt token");
    if (output.empty()) return {};
    switch (reference.kind) {
    case ForcedReference::Kind::Live: return scoreLive(model, prompt, output);
    case ForcedReference::Kind::Chunked:
        return scoreInForwards(model, prompt, output, static_cast<std::size_t>(reference.chunk));
    case ForcedReference::Kind::Prefill: break;
    }
    return scoreInForwards(model, prompt, output, prompt.size() + output.size());
}

}  // namespace kvscope
