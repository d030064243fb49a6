// SPDX-License-Identifier: MIT
#include "experiments/protocols.h"

#include "experiments/batch_protocol.h"

#include "core/cache/cache_io.h"
#include "core/cache/constructions.h"
#include "core/cache/fingerprint.h"
#include "core/cache/transplant.h"
#include "core/util/error.h"
#include "core/util/file_names.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

namespace kvscope::experiments {

int64_t firstDivergence(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return static_cast<int64_t>(i);
    return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

StopRules stopRules(const ItemContext& ctx, const Transformer& model, int64_t budget) {
    return stopRulesFor(model, budget, ctx.config.ignoreEos, ctx.config.stopStrings,
                        [&ctx](const std::vector<int64_t>& ids) { return ctx.tokenizer.decode(ids); });
}

TransplantOutcome judgeTransplant(const std::vector<int64_t>& result, const std::vector<int64_t>& donor,
                                  const std::vector<int64_t>& recipient) {
    TransplantOutcome o;
    o.splitFromDonor = firstDivergence(result, donor);
    o.followsDonor = o.splitFromDonor < 0;
    o.followsRecipient = firstDivergence(result, recipient) < 0;
    return o;
}

int64_t boundaryIndex(const ItemContext& ctx, const std::vector<int64_t>& trace) {
    const ExperimentConfig& c = ctx.config;
    const auto n = static_cast<int64_t>(trace.size());
    int64_t b = 0;
    if (c.boundaryRule == BoundaryRule::Offset)
        b = c.boundaryOffset <= n ? c.boundaryOffset : 0;
    else if (c.boundaryRule == BoundaryRule::Fraction)
        b = static_cast<int64_t>(c.boundaryFraction * static_cast<double>(n));
    else
        for (int64_t k = 1; k <= n && b == 0; ++k)  // the shortest prefix whose text contains the marker
            if (ctx.tokenizer.decode({trace.begin(), trace.begin() + k}).find(c.boundaryMarker) != std::string::npos)
                b = k;
    return (b > 0 && b < n) ? b : 0;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

int64_t continuationBudget(const ExperimentConfig& c, int64_t boundary) {
    return std::max<int64_t>(1, c.maxNewTokens - boundary);
}

namespace {

using nlohmann::json;

// ---- small helpers ------------------------------------------------------------------------------

struct Side {
    GenerationResult suffix;
    std::optional<std::string> answer;
    bool correct = false;
};

Side finishSide(const ItemContext& ctx, const DatasetItem& item, const std::vector<int64_t>& tracePrefix,
                GenerationResult r) {
    Side s;
    s.answer = extractAnswer(ctx.tokenizer.decode(concat(tracePrefix, r.ids)), ctx.config.answerExtract,
                             ctx.config.answerRegex);
    s.correct = s.answer && answersMatch(*s.answer, item.answer);
    s.suffix = std::move(r);
    return s;
}

std::optional<StepSummary> stepAt(const GenerationResult& r, int64_t i) {
    if (i < 0 || i >= static_cast<int64_t>(r.steps.size())) return std::nullopt;
    const StepRecord& s = r.steps[static_cast<std::size_t>(i)];
    return StepSummary{s.id, s.margin, s.entropy, s.logprob};
}

// f(), its time added to rec.secondsBy[step].
template <typename F>
auto timed(ItemRecord& rec, const std::string& step, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    auto result = f();
    rec.secondsBy[step] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

std::optional<int64_t> divergenceAt(int64_t div) { return div < 0 ? std::nullopt : std::optional<int64_t>(div); }

// Is item `id` in the outcome-blind transplant sample? Depends only on (seed, id).
bool selectedForTransplant(const ExperimentConfig& c, const std::string& id) {
    if (c.transplantSelection == TransplantSelection::All) return true;
    const std::string key = std::to_string(c.transplantSeed) + "|" + id;
    const std::string h = sha256Hex(key.data(), key.size());
    return static_cast<double>(std::stoull(h.substr(0, 12), nullptr, 16)) / static_cast<double>(1ull << 48) <
           c.transplantSampleFraction;
}

// ---- the protocols ----------------------------------------------------------------------------

struct Prefix {
    std::vector<int64_t> prompt, trace, ids;  // ids = prompt + trace[0:B]
    int64_t boundary = 0, budget = 0;         // budget: tokens left to continue
};

// The one-shot prefill of the prefix, by `m`.
KvCache prefillOf(const Transformer& m, const Prefix& p) {
    return buildCache(m, p.ids, Construction::parse("prefill"), static_cast<int64_t>(p.prompt.size()));
}

// A continuation that may end as soon as it has left every continuation it is compared with: a
// transplant or localize test only asks "equal to which?", and a result that has split from all of
// them cannot become equal again. The split token is kept, so where it split stays known.
GenerationResult continueUntilItLeaves(const ItemContext& ctx, const Transformer& m, const KvCache& cache,
                                       int64_t budget, const std::vector<const std::vector<int64_t>*>& references) {
    std::vector<bool> left(references.size(), false);
    const TokenCallback onToken = [&](const StepRecord& step, int64_t i) {
        bool all = true;
        for (std::size_t r = 0; r < references.size(); ++r) {
            const std::vector<int64_t>& ref = *references[r];
            left[r] = left[r] || i >= static_cast<int64_t>(ref.size()) || ref[static_cast<std::size_t>(i)] != step.id;
            all = all && left[r];
        }
        return !all;
    };
    return continueFrom(m, cache, ctx.config.sampling, stopRules(ctx, m, budget), onToken);
}

// The run's replay of an item from scratch: the trace decoded again, the live cache it retains at
// the boundary, a second one-shot prefill and both continuations. The replicas of `matched` and the
// run's audit (torch kernels) are this one computation.
struct Replay {
    GenerationResult trace;
    std::string liveFingerprint, prefillFingerprint;
    GenerationResult liveSuffix, prefillSuffix;
};

// The live side from a finished trace: a decode never rewrites a cache position, so the trace's
// cache cut at the boundary is the live cache there, and the trace after the boundary is its
// continuation (the same decode steps from the same state). With stop strings the continuation is
// decoded again, because a continuation checks them on its own text, not the trace's.
std::pair<KvCache, GenerationResult> liveSideOfTrace(const ItemContext& ctx, const GenerationResult& trace,
                                                     const KvCache& traceCache, int64_t promptLength, int64_t boundary,
                                                     int64_t budget) {
    KvCache live = traceCache.clone();
    live.truncate(promptLength + boundary);
    live.setConstruction("live");  // and the provenance buildLiveCache gives, which transplants check
    live.setPromptLength(promptLength);
    live.setModelFingerprint(ctx.model(ctx.config.dtypes.front()).fingerprint());
    if (!ctx.config.stopStrings.empty()) {
        GenerationResult suffix = continueWithRunRules(ctx, live, budget);
        return {std::move(live), std::move(suffix)};
    }
    GenerationResult suffix;
    suffix.ids.assign(trace.ids.begin() + boundary, trace.ids.end());
    suffix.steps.assign(trace.steps.begin() + boundary, trace.steps.end());
    suffix.stopReason = trace.stopReason;
    return {std::move(live), std::move(suffix)};
}

Replay replayItem(const ItemContext& ctx, const Prefix& p) {
    const Transformer& m = ctx.model(ctx.config.dtypes.front());
    Replay r;
    KvCache traceCache;
    r.trace = Generator(m).generate(p.prompt, ctx.config.sampling, stopRules(ctx, m, ctx.config.maxNewTokens), {},
                                    &traceCache);
    if (static_cast<int64_t>(r.trace.ids.size()) > p.boundary) {
        auto [live, suffix] =
            liveSideOfTrace(ctx, r.trace, traceCache, static_cast<int64_t>(p.prompt.size()), p.boundary, p.budget);
        r.liveFingerprint = fingerprintCache(live).overall;
        r.liveSuffix = std::move(suffix);
    }
    const KvCache prefill = prefillOf(m, p);
    r.prefillFingerprint = fingerprintCache(prefill).overall;
    r.prefillSuffix = continueWithRunRules(ctx, prefill, p.budget);
    return r;
}

// Where the replay differs from what the run recorded: one line per trajectory or cache fingerprint.
std::vector<std::string> replayMismatches(const Replay& again, const ItemRecord& rec) {
    std::vector<std::string> mismatches;
    auto compareIds = [&](const char* name, const std::optional<std::vector<int64_t>>& stored,
                          const std::vector<int64_t>& ids) {
        const int64_t at = firstDivergence(stored.value(), ids);
        if (at >= 0)
            mismatches.push_back("trajectory '" + std::string(name) + "' differs at token " + std::to_string(at));
    };
    compareIds("trace", rec.trajectories.trace, again.trace.ids);
    compareIds("suffix_live", rec.trajectories.suffixLive, again.liveSuffix.ids);
    compareIds("suffix_prefill", rec.trajectories.suffixPrefill, again.prefillSuffix.ids);
    if (again.liveFingerprint != rec.fingerprints.liveCache) mismatches.push_back("fingerprint 'live_cache' differs");
    if (again.prefillFingerprint != rec.fingerprints.prefillCache)
        mismatches.push_back("fingerprint 'prefill_cache' differs");
    return mismatches;
}

MatchedResult runMatched(const Replay& again, const Side& live, const Side& prefill) {
    const int64_t div = firstDivergence(live.suffix.ids, prefill.suffix.ids);
    MatchedResult r;
    r.suffixEqual = div < 0;
    r.firstDivergence = divergenceAt(div);
    r.liveAtDivergence = stepAt(live.suffix, div);
    r.prefillAtDivergence = stepAt(prefill.suffix, div);
    // Replicas: the same inputs from scratch must give the same tokens.
    r.replicaLiveExact = again.liveSuffix.ids == live.suffix.ids;
    r.replicaPrefillExact = again.prefillSuffix.ids == prefill.suffix.ids;
    r.answerLive = live.answer;
    r.answerPrefill = prefill.answer;
    r.correctLive = live.correct;
    r.correctPrefill = prefill.correct;
    r.suffixLengthLive = static_cast<int64_t>(live.suffix.ids.size());
    r.suffixLengthPrefill = static_cast<int64_t>(prefill.suffix.ids.size());
    for (const auto& step : live.suffix.steps) r.marginsLive.push_back(step.margin);
    return r;
}

// The token-by-token cache of the prefix in one precision, built once for bridge and the 2x2.
struct IncrementalCaches {
    std::map<std::string, KvCache> byPrecision;
    const KvCache& get(const ItemContext& ctx, const Prefix& p, const std::string& precision) {
        auto it = byPrecision.find(precision);
        if (it == byPrecision.end())
            it = byPrecision
                     .emplace(precision, buildCache(ctx.model(precision), p.ids, Construction::parse("incremental"),
                                                    static_cast<int64_t>(p.prompt.size())))
                     .first;
        return it->second;
    }
};

// Token-by-token vs one-shot prefill of the same prefix, in each of the run's precisions (the
// study's bf16 and fp32 unless the experiment names others), each timed as its own step: what a
// remedy costs. In the run's main precision the prefill continuation is the prefill side's own.
FixedPrefixResult runFixedPrefix2x2(const ItemContext& ctx, const Prefix& p, IncrementalCaches& incremental,
                                    const Side& prefillSide, ItemRecord& rec) {
    FixedPrefixResult out;
    for (const std::string& precision : ctx.config.precisions)
        out.byPrecision[precision] = timed(rec, "fixed_prefix_2x2 " + precision, [&] {
            const Transformer& m = ctx.model(precision);
            const StopRules stops = stopRules(ctx, m, p.budget);
            const auto inc = continueFrom(m, incremental.get(ctx, p, precision), ctx.config.sampling, stops);
            const std::vector<int64_t> pre = precision == ctx.config.dtypes.front()
                                                 ? prefillSide.suffix.ids
                                                 : continueFrom(m, prefillOf(m, p), ctx.config.sampling, stops).ids;
            const int64_t div = firstDivergence(inc.ids, pre);
            return FixedPrefixCell{div >= 0, divergenceAt(div)};
        });
    return out;
}

TransplantResult runTransplant(const ItemContext& ctx, const Prefix& p, const KvCache& live, const KvCache& prefill,
                               const Side& liveSide, const Side& prefillSide) {
    const Transformer& m = ctx.model(ctx.config.dtypes.front());
    TransplantSpec spec;
    spec.layers = TransplantSpec::parseLayers(ctx.config.transplantLayers, live.numLayers());
    spec.parts = ctx.config.transplantParts;
    const std::vector<const std::vector<int64_t>*> both{&liveSide.suffix.ids, &prefillSide.suffix.ids};
    const auto intoPrefill = continueUntilItLeaves(ctx, m, transplant(prefill, live, spec), p.budget, both).ids;
    const auto intoLive = continueUntilItLeaves(ctx, m, transplant(live, prefill, spec), p.budget, both).ids;
    auto verdict = [](const TransplantOutcome& o) { return TransplantVerdict{o.followsDonor, o.followsRecipient}; };
    return {ctx.config.transplantLayers, ctx.config.transplantParts,
            verdict(judgeTransplant(intoPrefill, liveSide.suffix.ids, prefillSide.suffix.ids)),
            verdict(judgeTransplant(intoLive, prefillSide.suffix.ids, liveSide.suffix.ids))};
}

// Smallest contiguous layer range [lo, hi) whose transplant (prefill <- live) reproduces the live
// suffix, by bisection on hi then lo, then K alone and V alone on that range.
// `allLayersFollow`: the transplant protocol's answer for all layers, K and V, when it ran (the same
// test, not repeated).
LocalizeResult runLocalize(const ItemContext& ctx, const Prefix& p, const KvCache& live, const KvCache& prefill,
                           const Side& liveSide, std::optional<bool> allLayersFollow) {
    const Transformer& m = ctx.model(ctx.config.dtypes.front());
    int tests = 0;
    auto follows = [&](int64_t lo, int64_t hi, KvParts parts) {
        ++tests;
        TransplantSpec spec;
        for (int64_t l = lo; l < hi; ++l) spec.layers.push_back(l);
        spec.parts = parts;
        return continueUntilItLeaves(ctx, m, transplant(prefill, live, spec), p.budget, {&liveSide.suffix.ids}).ids ==
               liveSide.suffix.ids;
    };
    const int64_t L = live.numLayers();
    const bool all = allLayersFollow ? (++tests, *allLayersFollow) : follows(0, L, KvParts::Both);
    if (!all) return LocalizeResult{false, {}, KvParts::Both, tests};
    int64_t lo = 0, hi = L;
    for (int64_t a = 1, b = L; a < b;) {  // smallest hi with [0, hi) sufficient
        const int64_t mid = (a + b) / 2;
        if (follows(0, mid, KvParts::Both))
            b = mid;
        else
            a = mid + 1;
        hi = b;
    }
    for (int64_t a = 0, b = hi - 1; a < b;) {  // largest lo with [lo, hi) sufficient
        const int64_t mid = (a + b + 1) / 2;
        if (follows(mid, hi, KvParts::Both))
            a = mid;
        else
            b = mid - 1;
        lo = a;
    }
    KvParts parts = KvParts::Both;
    if (follows(lo, hi, KvParts::Keys))
        parts = KvParts::Keys;
    else if (follows(lo, hi, KvParts::Values))
        parts = KvParts::Values;
    std::vector<int64_t> layers;
    for (int64_t l = lo; l < hi; ++l) layers.push_back(l);
    return LocalizeResult{true, layers, parts, tests};
}

// bridge: the faithful rebuild of the live cache, token by token with torch kernels (one forward
// with invariant ones, where that is the same thing), against the live cache's fingerprint.
BridgeResult runBridge(const ItemContext& ctx, const Prefix& p, const KvCache& prefill, IncrementalCaches& incremental,
                       const ItemRecord& rec) {
    const ExperimentConfig& c = ctx.config;
    const KvCache& rebuilt = isInvariant(c.kernels) ? prefill : incremental.get(ctx, p, c.dtypes.front());
    return BridgeResult{fingerprintCache(rebuilt).overall == rec.fingerprints.liveCache, rebuilt.construction()};
}

// Both sides of a split item: the boundary's two caches and their continuations.
struct SplitSides {
    const KvCache &live, &prefill;
    const Side &liveSide, &prefillSide;
};

// An item whose continuations split: transplant (where the run selects the item) and localize.
void explainDivergence(const ItemContext& ctx, const std::string& itemId, const Prefix& p, const SplitSides& s,
                       ItemRecord& rec) {
    const ExperimentConfig& c = ctx.config;
    if (c.runs(Protocol::Transplant) && selectedForTransplant(c, itemId))
        rec.results.transplant = timed(
            rec, "transplant", [&] { return runTransplant(ctx, p, s.live, s.prefill, s.liveSide, s.prefillSide); });
    if (!c.runs(Protocol::Localize)) return;
    rec.results.localize = timed(rec, "localize", [&] {
        const std::optional<TransplantResult>& t = rec.results.transplant;
        const bool sameTest = t && c.transplantLayers == "all" && c.transplantParts == KvParts::Both;
        return runLocalize(ctx, p, s.live, s.prefill, s.liveSide,
                           sameTest ? std::optional<bool>(t->prefillFromLive.followsDonor) : std::nullopt);
    });
}

// --keep-caches: the boundary's live and prefill caches as files in `dir`, named in the results.
void keepCaches(const std::string& dir, const std::string& itemId, const KvCache& live, const KvCache& prefill,
                ItemRecord& rec) {
    std::filesystem::create_directories(dir);
    for (const auto& [name, cache] : {std::pair<const char*, const KvCache*>{"live", &live}, {"prefill", &prefill}}) {
        const std::string path =
            (std::filesystem::path(dir) / (fileNameComponent(itemId) + "." + name + ".safetensors")).string();
        saveCache(*cache, path);
        rec.results.caches[name] = path;
    }
}

}  // namespace

std::vector<int64_t> promptIdsFor(const ItemContext& ctx, const DatasetItem& item) {
    if (!item.prefixIds.empty()) return item.prefixIds;
    std::vector<ChatMessage> messages = item.messages;
    if (messages.empty()) messages.push_back({"user", item.prompt});
    const ChatPrompt chat = ctx.chat->render(messages);
    return ctx.tokenizer.encode(chat.text, chat.addSpecialTokens);
}

int64_t storedBoundary(const ItemRecord& item) {
    if (item.status != ItemStatus::Done || !item.results.trace || !item.results.trace->boundary)
        throw UsageError("item '" + item.itemId + "' has no stage boundary: nothing to compare");
    return *item.results.trace->boundary;
}

BoundaryState rebuildStoredBoundary(const ItemContext& ctx, const ItemRecord& item,
                                    const std::function<bool()>& keepGoing) {
    const int64_t boundary = storedBoundary(item);  // first: it refuses an item without one, by name
    const std::string where = "the ledger";
    BoundaryState state = rebuildBoundary(ctx, storedTrajectory(item, "prompt", where),
                                          storedTrajectory(item, "trace", where), boundary, keepGoing);
    if (state.liveSuffix.ids != storedTrajectory(item, "suffix_live", where) ||
        state.prefillSuffix.ids != storedTrajectory(item, "suffix_prefill", where))
        throw UsageError("rebuilding item " + item.itemId +
                         " does not reproduce the ledger's continuations "
                         "(has the model or kvscope changed since the run? `kvscope audit` tells)");
    return state;
}

BoundaryState rebuildBoundary(const ItemContext& ctx, const std::vector<int64_t>& prompt,
                              const std::vector<int64_t>& trace, int64_t boundary,
                              const std::function<bool()>& keepGoing) {
    if (boundary <= 0 || boundary > static_cast<int64_t>(trace.size()))
        throw UsageError("stage boundary " + std::to_string(boundary) + " is outside the trace (1.." +
                         std::to_string(trace.size()) + " generated tokens)");
    const ExperimentConfig& c = ctx.config;
    const Transformer& m = ctx.model(c.dtypes.front());
    BoundaryState b;
    b.prompt = prompt;
    b.boundary = boundary;
    b.prefix = concat(prompt, {trace.begin(), trace.begin() + boundary});
    b.budget = continuationBudget(c, boundary);
    auto checkpoint = [&] {
        if (keepGoing && !keepGoing()) throw Cancelled("cancelled while rebuilding the stage boundary");
    };
    const TokenCallback onToken = [&](const StepRecord&, int64_t) { return !keepGoing || keepGoing(); };
    b.live = buildLiveCache(m, prompt, boundary, c.sampling);
    if (b.live.ids() != b.prefix)
        throw UsageError(
            "decoding the prompt again does not reproduce the stored trace up to the boundary "
            "(different model, precision or sampling than the run?)");
    checkpoint();
    b.prefill = buildCache(m, b.prefix, Construction::parse("prefill"), static_cast<int64_t>(prompt.size()));
    checkpoint();
    b.liveSuffix = continueWithRunRules(ctx, b.live, b.budget, onToken);
    checkpoint();
    b.prefillSuffix = continueWithRunRules(ctx, b.prefill, b.budget, onToken);
    checkpoint();
    return b;
}

GenerationResult continueWithRunRules(const ItemContext& ctx, const KvCache& cache, int64_t budget,
                                      const TokenCallback& onToken, const std::string& dtype) {
    return continueWithRunRules(ctx, ctx.model(dtype.empty() ? ctx.config.dtypes.front() : dtype), cache, budget,
                                onToken);
}

GenerationResult continueWithRunRules(const ItemContext& ctx, const Transformer& model, const KvCache& cache,
                                      int64_t budget, const TokenCallback& onToken) {
    return continueFrom(model, cache, ctx.config.sampling, stopRules(ctx, model, budget), onToken);
}

namespace {

ComparedSide buildSide(const ItemContext& ctx, const ModelLookup& models, const BoundaryState& boundary,
                       const SideRecipe& recipe, const std::function<bool()>& keepGoing) {
    const std::string dtype = recipe.dtype.empty() ? ctx.config.dtypes.front() : recipe.dtype;
    const Kernels kernels = recipe.kernels.value_or(ctx.config.kernels);
    const Transformer& model = models(dtype, kernels);
    ComparedSide side;
    side.cache = buildCache(model, boundary.prefix, Construction::parse(recipe.construction),
                            static_cast<int64_t>(boundary.prompt.size()));
    side.continuation = continueWithRunRules(ctx, model, side.cache, boundary.budget,
                                             [&](const StepRecord&, int64_t) { return !keepGoing || keepGoing(); });
    if (side.continuation.stopReason == StopReason::Cancelled) throw Cancelled("comparison cancelled");
    side.label = side.cache.construction() + " \u00b7 " + dtype;
    if (isInvariant(kernels)) side.label += " \u00b7 " + kernelsName(kernels) + " kernels";
    return side;
}

}  // namespace

SideComparison compareSides(const ItemContext& ctx, const ModelLookup& models, const BoundaryState& boundary,
                            const SideRecipe& a, const SideRecipe& b, const std::function<bool()>& keepGoing) {
    SideComparison c;
    c.a = buildSide(ctx, models, boundary, a, keepGoing);
    c.b = buildSide(ctx, models, boundary, b, keepGoing);
    c.firstDivergence = firstDivergence(c.a.continuation.ids, c.b.continuation.ids);
    if (c.a.cache.dtype() == c.b.cache.dtype()) c.diff = diffCaches(c.a.cache, c.b.cache);
    return c;
}

ItemRecord runItem(const ItemContext& ctx, const DatasetItem& item, int64_t index) {
    const auto t0 = std::chrono::steady_clock::now();
    const ExperimentConfig& c = ctx.config;
    const Transformer& m = ctx.model(c.dtypes.front());
    ItemRecord rec;
    rec.itemId = item.id;
    rec.index = index;

    Prefix p;
    p.prompt = promptIdsFor(ctx, item);
    KvCache traceCache;
    const GenerationResult trace = timed(rec, "trace", [&] {
        return Generator(m).generate(p.prompt, c.sampling, stopRules(ctx, m, c.maxNewTokens), {}, &traceCache);
    });
    p.trace = trace.ids;
    p.boundary = boundaryIndex(ctx, p.trace);
    rec.trajectories.prompt = p.prompt;
    rec.trajectories.trace = p.trace;
    rec.results.trace = TraceResult{static_cast<int64_t>(p.trace.size()), trace.stopReason,
                                    p.boundary ? std::optional<int64_t>(p.boundary) : std::nullopt};
    rec.tokens = static_cast<int64_t>(p.trace.size());
    // The batch protocol needs the prompt only, not a boundary.
    if (c.runs(Protocol::Batch)) {
        BatchRun batch = timed(rec, "batch", [&] { return runBatch(ctx, index, p.prompt); });
        rec.results.batch = std::move(batch.result);
        rec.trajectories.batch = std::move(batch.continuations);
    }
    if (p.boundary == 0) {
        rec.status = ItemStatus::NoBoundary;
        rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return rec;
    }
    rec.status = ItemStatus::Done;
    const auto P = static_cast<int64_t>(p.prompt.size());
    p.ids = concat(p.prompt, {p.trace.begin(), p.trace.begin() + p.boundary});
    p.budget = continuationBudget(c, p.boundary);
    auto liveParts = liveSideOfTrace(ctx, trace, traceCache, P, p.boundary, p.budget);
    const KvCache live = std::move(liveParts.first);  // named, not a structured binding: lambdas below use it
    traceCache = KvCache();
    const std::vector<int64_t> generated(p.trace.begin(), p.trace.begin() + p.boundary);
    const Side liveSide = finishSide(ctx, item, generated, std::move(liveParts.second));
    const KvCache prefill = timed(rec, "prefill side", [&] { return prefillOf(m, p); });
    const Side prefillSide = finishSide(
        ctx, item, generated, timed(rec, "prefill side", [&] { return continueWithRunRules(ctx, prefill, p.budget); }));
    rec.trajectories.suffixLive = liveSide.suffix.ids;
    rec.trajectories.suffixPrefill = prefillSide.suffix.ids;
    rec.fingerprints.liveCache = fingerprintCache(live).overall;
    rec.fingerprints.prefillCache = fingerprintCache(prefill).overall;
    rec.tokens += static_cast<int64_t>(liveSide.suffix.ids.size() + prefillSide.suffix.ids.size() + p.boundary);
    const bool divergent = liveSide.suffix.ids != prefillSide.suffix.ids;

    const bool auditByReplay = c.runs(Protocol::Audit) && !auditsAtPrefillSpeed(c, AuditDepth::Auto);
    std::optional<Replay> again;
    if (c.runs(Protocol::Matched) || auditByReplay) again = timed(rec, "replay", [&] { return replayItem(ctx, p); });
    if (c.runs(Protocol::Matched)) rec.results.matched = runMatched(*again, liveSide, prefillSide);
    IncrementalCaches incremental;
    if (c.runs(Protocol::Bridge))
        rec.results.bridge = timed(rec, "bridge", [&] { return runBridge(ctx, p, prefill, incremental, rec); });
    if (c.runs(Protocol::FixedPrefix2x2))
        rec.results.fixedPrefix2x2 = runFixedPrefix2x2(ctx, p, incremental, prefillSide, rec);
    if (divergent) explainDivergence(ctx, item.id, p, {live, prefill, liveSide, prefillSide}, rec);
    // One fingerprint over everything compared, so an audit can check the comparison as a whole.
    const std::string comparison = toJson(rec.results).dump() + json(rec.trajectories.byName()).dump();
    rec.fingerprints.comparison = sha256Hex(comparison.data(), comparison.size());
    if (!ctx.keepCachesDir.empty()) keepCaches(ctx.keepCachesDir, item.id, live, prefill, rec);
    if (c.runs(Protocol::Audit)) {  // the trajectories and caches replayed; `kvscope audit` replays every protocol too
        const auto mismatches = auditByReplay ? replayMismatches(*again, rec)
                                              : timed(rec, "audit", [&] { return auditItem(ctx, item, rec); });
        rec.results.audit = AuditResult{mismatches.empty(), mismatches};
    }
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rec;
}

}  // namespace kvscope::experiments
