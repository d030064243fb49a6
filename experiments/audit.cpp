// SPDX-License-Identifier: MIT
// The audit: a stored item replayed, at prefill speed (invariant kernels: one forward per trajectory)
// or in full (every protocol again, token by token), and compared with the ledger.
#include "experiments/protocols.h"

#include "core/cache/constructions.h"
#include "core/cache/fingerprint.h"
#include "core/util/error.h"

#include <algorithm>

namespace kvscope::experiments {

namespace {

// True when a decode that has produced `generated` (after `context` tokens) stops there.
bool stopsAfter(const ItemContext& ctx, const Transformer& m, const std::vector<int64_t>& generated, int64_t context,
                int64_t budget) {
    const StopRules stops = stopRules(ctx, m, budget);
    const int64_t n = static_cast<int64_t>(generated.size());
    const bool eos = std::find(stops.eosIds.begin(), stops.eosIds.end(), generated.back()) != stops.eosIds.end();
    bool stopString = false;
    if (!stops.stopStrings.empty()) {
        const std::string text = ctx.tokenizer.decode(generated);
        for (const auto& s : stops.stopStrings)
            stopString = stopString || (!s.empty() && text.find(s) != std::string::npos);
    }
    return eos || stopString || n == budget || context + n >= m.config().maxPositionEmbeddings;
}

// A stored continuation of `context` checked by one forward (teacher forcing): "" or the mismatch.
std::string verifyContinuation(const ItemContext& ctx, const std::string& name, const std::vector<int64_t>& context,
                               const std::vector<int64_t>& ids, int64_t budget) {
    const Transformer& m = ctx.model(ctx.config.dtypes.front());
    if (ids.empty()) return "trajectory '" + name + "' is empty";
    const auto L = static_cast<int64_t>(context.size());
    KvCache cache = m.newCache(L + static_cast<int64_t>(ids.size()));
    const torch::Tensor logits = m.forward(concat(context, {ids.begin(), ids.end() - 1}), cache, Logits::All);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        const int64_t at = L + static_cast<int64_t>(i);  // position of ids[i]: its draw's key
        if (chooseToken(logits[at - 1], ctx.config.sampling, static_cast<std::uint64_t>(at)).id != ids[i])
            return "trajectory '" + name + "' differs at token " + std::to_string(i);
        const bool last = i + 1 == ids.size();
        if (stopsAfter(ctx, m, {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i) + 1}, L, budget) != last)
            return "trajectory '" + name + "' " + (last ? "ends at" : "runs past a stop at") + " token " +
                   std::to_string(i);
    }
    return "";
}

std::vector<int64_t> storedIds(const ItemRecord& stored, const std::string& name,
                               std::vector<std::string>& mismatches) {
    const std::vector<int64_t>* ids = stored.trajectories.find(name);
    if (!ids) mismatches.push_back("trajectory '" + name + "' is not in the ledger");
    return ids ? *ids : std::vector<int64_t>();
}

std::vector<std::string> auditAtPrefillSpeed(const ItemContext& ctx, const DatasetItem& item,
                                             const ItemRecord& stored) {
    const ExperimentConfig& c = ctx.config;
    std::vector<std::string> mismatches;
    const std::vector<int64_t> prompt = promptIdsFor(ctx, item);
    if (storedIds(stored, "prompt", mismatches) != prompt) mismatches.push_back("trajectory 'prompt' differs");
    const std::vector<int64_t> trace = storedIds(stored, "trace", mismatches);
    if (!mismatches.empty()) return mismatches;
    if (auto m = verifyContinuation(ctx, "trace", prompt, trace, c.maxNewTokens); !m.empty()) return {m};
    const int64_t boundary = boundaryIndex(ctx, trace);
    if ((boundary == 0) != (stored.status == ItemStatus::NoBoundary))
        return {"the stage boundary differs from the run's"};
    if (boundary == 0) return {};
    const std::vector<int64_t> prefix = concat(prompt, {trace.begin(), trace.begin() + boundary});
    const int64_t budget = continuationBudget(c, boundary);
    for (const char* name : {"suffix_live", "suffix_prefill"})
        if (auto m = verifyContinuation(ctx, name, prefix, storedIds(stored, name, mismatches), budget); !m.empty())
            mismatches.push_back(m);
    // With these kernels one forward over the prefix is the cache a decode retained there.
    const Transformer& m = ctx.model(c.dtypes.front());
    const std::string rebuilt =
        fingerprintCache(buildCache(m, prefix, Construction::parse("prefill"), static_cast<int64_t>(prompt.size())))
            .overall;
    if (stored.fingerprints.liveCache != rebuilt) mismatches.push_back("fingerprint 'live_cache' differs");
    if (stored.fingerprints.prefillCache != rebuilt) mismatches.push_back("fingerprint 'prefill_cache' differs");
    return mismatches;
}

}  // namespace

bool auditsAtPrefillSpeed(const ExperimentConfig& config, AuditDepth depth) {
    if (depth == AuditDepth::PrefillSpeed && !isInvariant(config.kernels))
        throw UsageError("a prefill-speed audit needs a run made with invariant kernels (this run used " +
                         kernelsName(config.kernels) + " kernels, where only token by token reproduces bits)");
    return depth == AuditDepth::PrefillSpeed || (depth == AuditDepth::Auto && isInvariant(config.kernels));
}

std::vector<std::string> auditItem(const ItemContext& ctx, const DatasetItem& item, const ItemRecord& stored,
                                   AuditDepth depth) {
    if (auditsAtPrefillSpeed(ctx.config, depth)) return auditAtPrefillSpeed(ctx, item, stored);
    ExperimentConfig replayConfig = ctx.config;
    replayConfig.protocols.erase(Protocol::Audit);
    ItemContext replayCtx{replayConfig, ctx.tokenizer, ctx.models, "", ctx.dataset, ctx.chat};
    const ItemRecord again = runItem(replayCtx, item, stored.index);
    std::vector<std::string> mismatches;
    for (const auto& [name, ids] : stored.trajectories.byName()) {
        const std::vector<int64_t>* replayed = again.trajectories.find(name);
        if (!replayed) {
            mismatches.push_back("trajectory '" + name + "' was not produced by the replay");
            continue;
        }
        const int64_t at = firstDivergence(ids, *replayed);
        if (at >= 0) mismatches.push_back("trajectory '" + name + "' differs at token " + std::to_string(at));
    }
    const std::map<std::string, std::string> replayedFingerprints = again.fingerprints.byName();
    for (const auto& [name, value] : stored.fingerprints.byName()) {
        const auto it = replayedFingerprints.find(name);
        if (it == replayedFingerprints.end() || it->second != value)
            mismatches.push_back("fingerprint '" + name + "' differs");
    }
    return mismatches;
}

}  // namespace kvscope::experiments
