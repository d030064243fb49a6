// SPDX-License-Identifier: MIT
#include "core/decode/generator.h"

#include "core/util/error.h"

#include <algorithm>

namespace kvscope {

StopRules stopRulesFor(const Transformer& model, int64_t maxNewTokens, bool ignoreEos,
                       std::vector<std::string> stopStrings,
                       std::function<std::string(const std::vector<int64_t>&)> detokenize) {
    if (!stopStrings.empty() && !detokenize)
        throw UsageError("stop strings need a tokenizer to decode the generated text");
    StopRules s;
    s.maxNewTokens = maxNewTokens;
    if (!ignoreEos) s.eosIds = model.config().eosTokenIds;
    s.stopStrings = std::move(stopStrings);
    s.detokenize = std::move(detokenize);
    return s;
}

torch::Tensor Generator::prefill(const std::vector<int64_t>& ids, KvCache& cache) const {
    torch::NoGradGuard noGrad;
    return model_.forward(ids, cache, Logits::Last).reshape({-1});
}

torch::Tensor Generator::decodeOne(int64_t id, KvCache& cache) const {
    torch::NoGradGuard noGrad;
    return model_.forward({id}, cache, Logits::Last).reshape({-1});
}

namespace {

// Records the first op whose output holds a NaN or an infinity (attention scores hold -inf where the
// causal mask hides a key; only NaN or +inf count there).
class FirstNonFiniteOp : public ForwardObserver {
public:
    static bool nonFinite(const char* op, const torch::Tensor& value) {
        if (std::string(op) == "scores") return (torch::isnan(value).any() | torch::isposinf(value).any()).item<bool>();
        return !torch::isfinite(value).all().item<bool>();
    }
    void onOp(int64_t layer, const char* op, const torch::Tensor& value, int64_t) override {
        if (found_.empty() && nonFinite(op, value))
            found_ =
                (layer < 0 ? std::string("after the layers") : "layer " + std::to_string(layer)) + ", op '" + op + "'";
    }
    const std::string& found() const { return found_; }

private:
    std::string found_;
};

// Logits with NaN or Inf come from broken weights or settings; a token chosen from them would be a
// silent wrong answer. One extra forward over the same ids with an observer names where they start.
void requireFiniteLogits(const Transformer& model, const torch::Tensor& logits, const KvCache& cache, int64_t step) {
    if (torch::isfinite(logits).all().item<bool>()) return;
    FirstNonFiniteOp first;
    KvCache scratch = model.newCache(cache.length());
    model.forward(cache.ids(), scratch, Logits::Last, &first);
    throw TensorError("the logits for generated token " + std::to_string(step) + " (position " +
                      std::to_string(cache.length()) + ") contain NaN or Inf; the first non-finite value is at " +
                      (first.found().empty() ? std::string("no op when recomputed in one forward") : first.found()) +
                      " (check the weights, rms_norm_eps and rope_theta)");
}

bool hitsStopString(const StopRules& stops, const std::vector<int64_t>& generated) {
    if (stops.stopStrings.empty()) return false;
    if (!stops.detokenize) throw UsageError("stop strings need a tokenizer to decode the generated text");
    const std::string text = stops.detokenize(generated);
    return std::any_of(stops.stopStrings.begin(), stops.stopStrings.end(),
                       [&](const std::string& s) { return !s.empty() && text.find(s) != std::string::npos; });
}
}  // namespace

GenerationResult Generator::decodeN(KvCache& cache, torch::Tensor logits, const SamplingParams& sampling,
                                    const StopRules& stops, const TokenCallback& onToken) const {
    GenerationResult result;
    while (static_cast<int64_t>(result.ids.size()) < stops.maxNewTokens) {
        const auto position = static_cast<std::uint64_t>(cache.length());
        requireFiniteLogits(model_, logits, cache, static_cast<int64_t>(result.ids.size()));
        StepRecord step = chooseToken(logits, sampling, position);
        result.ids.push_back(step.id);
        result.steps.push_back(step);
        const int64_t index = static_cast<int64_t>(result.ids.size()) - 1;
        if (onToken && !onToken(step, index)) {
            result.stopReason = StopReason::Cancelled;
            return result;
        }
        if (std::find(stops.eosIds.begin(), stops.eosIds.end(), step.id) != stops.eosIds.end()) {
            result.stopReason = StopReason::Eos;
            return result;
        }
        if (hitsStopString(stops, result.ids)) {
            result.stopReason = StopReason::StopString;
            return result;
        }
        if (static_cast<int64_t>(result.ids.size()) == stops.maxNewTokens) break;
        if (cache.length() >= model_.config().maxPositionEmbeddings) {
            result.stopReason = StopReason::ContextFull;
            return result;
        }
        logits = decodeOne(step.id, cache);
    }
    result.stopReason = StopReason::MaxNewTokens;
    return result;
}

GenerationResult Generator::generate(const std::vector<int64_t>& prompt, const SamplingParams& sampling,
                                     const StopRules& stops, const TokenCallback& onToken, KvCache* cacheOut) const {
    if (prompt.empty()) throw UsageError("the prompt has no tokens");
    // Room for a typical continuation up front; a longer one grows the cache as it goes, so a huge
    // --max-new-tokens does not allocate its whole KV before the first token.
    KvCache cache =
        model_.newCache(static_cast<int64_t>(prompt.size()) + std::min<int64_t>(stops.maxNewTokens, kUpfrontTokens));
    cache.setPromptLength(static_cast<int64_t>(prompt.size()));
    torch::Tensor logits = prefill(prompt, cache);
    GenerationResult result = decodeN(cache, logits, sampling, stops, onToken);
    if (cacheOut) *cacheOut = std::move(cache);
    return result;
}

}  // namespace kvscope
