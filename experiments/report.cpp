// SPDX-License-Identifier: MIT
// The study's tables as values (report_render.cpp writes them as JSON and Markdown), and the per-item CSV.
#include "experiments/report.h"

#include "experiments/manifest.h"

#include "core/model/numerics.h"
#include "core/stats/stats.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace kvscope::experiments {

std::optional<double> measureOf(const ItemRecord& item, ItemMeasure measure) {
    const auto& m = item.results.matched;
    if (!m || !m->firstDivergence) return std::nullopt;
    if (measure == ItemMeasure::FirstDivergence) return static_cast<double>(*m->firstDivergence);
    const auto& at = m->liveAtDivergence;
    return at && !std::isnan(at->margin) ? std::optional<double>(at->margin) : std::nullopt;
}

std::vector<HistogramBar> histogramOf(const std::vector<ItemRecord>& items, ItemMeasure measure, int maxBars) {
    std::vector<double> values;
    for (const ItemRecord& item : items)
        if (const auto v = measureOf(item, measure)) values.push_back(*v);
    if (values.empty()) return {};
    const double top = *std::max_element(values.begin(), values.end());
    // Steps are integers: a bar per step while they fit, else whole steps per bar. Margins are
    // continuous and non-negative: equal bars from 0, the last one closed over the maximum.
    const double width = measure == ItemMeasure::FirstDivergence ? std::ceil((top + 1) / maxBars)
                         : top > 0                               ? top / maxBars
                                                                 : 1.0;
    const int count = measure == ItemMeasure::FirstDivergence ? static_cast<int>(std::floor(top / width)) + 1 : maxBars;
    std::vector<HistogramBar> bars(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) bars[static_cast<std::size_t>(i)] = {i * width, (i + 1) * width, 0};
    if (measure == ItemMeasure::MarginAtDivergence)  // [lower, upper) must hold the largest margin too
        bars.back().upper = std::nextafter(std::max(bars.back().upper, top), HUGE_VAL);
    for (const double v : values) {
        const auto at = static_cast<std::size_t>(std::clamp<double>(std::floor(v / width), 0, count - 1));
        ++bars[at].count;
    }
    return bars;
}

namespace {

using nlohmann::json;

Quantiles quantilesOf(std::vector<double> v) {
    Quantiles q;
    q.n = static_cast<int64_t>(v.size());
    if (v.empty()) return q;
    std::sort(v.begin(), v.end());
    auto at = [&](double f) { return v[static_cast<std::size_t>(std::floor(f * static_cast<double>(v.size() - 1)))]; };
    q.min = v.front(), q.p10 = at(0.1), q.median = at(0.5), q.p90 = at(0.9), q.max = v.back();
    return q;
}

double fraction(int64_t k, int64_t n) { return n ? static_cast<double>(k) / static_cast<double>(n) : 0.0; }

// The live side's margins before the first divergence (all of them when the suffixes agree).
void addNonDivergentMargins(const MatchedResult& m, std::vector<double>& out) {
    const auto all = static_cast<int64_t>(m.marginsLive.size());
    const int64_t upTo = std::min(m.firstDivergence.value_or(all), all);
    out.insert(out.end(), m.marginsLive.begin(), m.marginsLive.begin() + upTo);
}

MatchedSummary summarizeMatched(const std::vector<ItemRecord>& items) {
    MatchedSummary t;
    std::vector<bool> live, prefill;
    std::vector<double> atDivergence, nonDivergent, firstDivergence;
    for (const auto& item : items) {
        if (item.status == ItemStatus::NoBoundary) ++t.noBoundary;
        if (!item.results.matched) continue;
        const MatchedResult& m = *item.results.matched;
        ++t.n;
        t.suffixDiffer += !m.suffixEqual;
        t.labelDiffer += m.labelFlipped();
        t.replicasLive += m.replicaLiveExact;
        t.replicasPrefill += m.replicaPrefillExact;
        live.push_back(m.correctLive);
        prefill.push_back(m.correctPrefill);
        addNonDivergentMargins(m, nonDivergent);
        if (m.liveAtDivergence) atDivergence.push_back(m.liveAtDivergence->margin);
        if (m.firstDivergence) firstDivergence.push_back(static_cast<double>(*m.firstDivergence));
    }
    t.firstDivergence = quantilesOf(firstDivergence);
    t.marginsAtDivergence = quantilesOf(atDivergence);
    t.marginsNonDivergent = quantilesOf(nonDivergent);
    t.firstDivergenceBars = histogramOf(items, ItemMeasure::FirstDivergence, 16);
    if (t.n == 0) return t;
    const auto counts = stats::PairedCounts::from(live, prefill);
    PairedAccuracy a;
    a.live = fraction(counts.bothRight + counts.onlyFirst, t.n);
    a.prefill = fraction(counts.bothRight + counts.onlySecond, t.n);
    a.diff = stats::accuracyDifference(counts);
    a.bootstrapCi = stats::pairedBootstrap(live, prefill, 10000, 0);
    a.newcombeCi = stats::newcombePaired(counts);
    a.mcnemarP = stats::mcnemarExact(counts.onlyFirst, counts.onlySecond);
    t.accuracy = a;
    return t;
}

// Each precision's row of the 2x2, in precisionNames()' order (bf16, fp32, then the remedies).
std::map<std::string, DisagreementRow> disagreementsByPrecision(const std::vector<ItemRecord>& items) {
    std::map<std::string, DisagreementRow> rows;
    for (const auto& item : items)
        if (item.results.fixedPrefix2x2)
            for (const auto& [precision, cell] : item.results.fixedPrefix2x2->byPrecision) {
                DisagreementRow& row = rows[precision];
                ++row.n;
                row.disagree += cell.disagree;
            }
    for (auto& [precision, row] : rows) row.wilson = stats::wilson(row.disagree, row.n);
    return rows;
}

// {n: items where the protocol ran, held: those where `flag` holds}.
template <typename Result>
ProtocolCount countFlag(const std::vector<ItemRecord>& items, std::optional<Result> ItemResults::* protocol,
                        bool Result::* flag) {
    ProtocolCount c;
    for (const auto& item : items)
        if (const auto& result = item.results.*protocol) {
            ++c.n;
            c.held += (*result).*flag;
        }
    return c;
}

TransplantSummary summarizeTransplants(const std::vector<ItemRecord>& items) {
    TransplantSummary t;
    for (const auto& item : items) {
        if (!item.results.transplant) continue;
        ++t.items;
        t.prefillFollowsLive += item.results.transplant->prefillFromLive.followsDonor;
        t.liveFollowsPrefill += item.results.transplant->liveFromPrefill.followsDonor;
    }
    return t;
}

std::vector<LocalizeRow> localizeRows(const std::vector<ItemRecord>& items) {
    std::vector<LocalizeRow> rows;
    for (const auto& item : items)
        if (item.results.localize) rows.push_back({item.itemId, *item.results.localize});
    return rows;
}

// The batch protocol per kernel set and batch size: items compared, logits and caches bit-equal to
// alone, greedy suffixes that split, where (generated step) and at what margin, and the first item's
// first differing prefill op (the locator's answer for that size).
std::map<std::string, std::map<int64_t, BatchRow>> summarizeBatches(const std::vector<ItemRecord>& items) {
    std::map<std::string, std::map<int64_t, BatchRow>> rows;
    std::map<std::string, std::map<int64_t, std::pair<std::vector<double>, std::vector<double>>>> steps;
    for (const auto& item : items) {
        if (!item.results.batch) continue;
        for (const auto& [kernels, sizes] : item.results.batch->byKernels)
            for (const auto& [size, c] : sizes) {
                BatchRow& row = rows[kernels][size];
                auto& [at, margins] = steps[kernels][size];
                ++row.n;
                row.logitsEqual += c.logitsEqual;
                row.cacheEqual += c.cacheEqual;
                if (c.firstDivergence) {
                    ++row.suffixSplit;
                    at.push_back(static_cast<double>(*c.firstDivergence));
                    if (c.marginAtDivergence) margins.push_back(*c.marginAtDivergence);
                }
                if (!row.firstDifferingOp && c.firstDifferingOp)
                    row.firstDifferingOp = {item.itemId, *c.firstDifferingOp};
            }
    }
    for (auto& [kernels, sizes] : rows)
        for (auto& [size, row] : sizes) {
            const auto& [at, margins] = steps[kernels][size];
            row.firstDivergence = quantilesOf(at);
            row.marginAtDivergence = quantilesOf(margins);
        }
    return rows;
}

TimeSummary summarizeTime(const std::vector<ItemRecord>& items) {
    TimeSummary t;
    std::vector<double> seconds;
    for (const auto& item : items) {
        ++t.items;
        t.seconds += item.seconds;
        t.tokens += item.tokens;
        seconds.push_back(item.seconds);
        if (item.results.divergent()) t.divergentSeconds += item.seconds, ++t.divergentItems;
    }
    t.secondsPerItem = quantilesOf(seconds);
    return t;
}

// The CPU of the machine that created the run (a merged run's items may come from others: its
// mixed_environments say so), where the manifest records it.
std::optional<std::string> creatorCpuModel(const json& manifest) {
    const auto machine = manifest.find("machine");
    if (machine == manifest.end() || !machine->is_object()) return std::nullopt;
    const auto model = machine->find("cpu_model");
    return model != machine->end() && model->is_string() ? std::optional<std::string>(*model) : std::nullopt;
}

// A CSV cell: empty where the value is absent; numbers and booleans as JSON writes them.
template <typename T>
std::string csvField(const std::optional<T>& v) {
    return v ? json(*v).dump() : std::string();
}

std::string csvFlag(const MatchedResult* m, bool MatchedResult::* flag) {
    return csvField(m ? std::optional<bool>(m->*flag) : std::nullopt);
}

}  // namespace

bool StudySummary::ranStudyProtocols() const {
    bool any = matched.n != 0 || matched.noBoundary != 0;
    for (const auto& [precision, row] : fixedPrefix) any = any || row.n != 0;
    return any || bridge.n != 0 || audit.n != 0 || transplant.items != 0 || !localize.empty();
}

std::vector<std::string> precisionsInReadingOrder(const std::set<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& name : precisionNames())
        if (names.count(name)) out.push_back(name);
    for (const std::string& name : names)
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    return out;
}

StudySummary summarizeStudy(const std::vector<ItemRecord>& items) {
    StudySummary s;
    s.matched = summarizeMatched(items);
    s.fixedPrefix = disagreementsByPrecision(items);
    s.bridge = countFlag(items, &ItemResults::bridge, &BridgeResult::exact);
    s.audit = countFlag(items, &ItemResults::audit, &AuditResult::reproduced);
    s.transplant = summarizeTransplants(items);
    s.localize = localizeRows(items);
    s.batch = summarizeBatches(items);
    s.time = summarizeTime(items);
    return s;
}

RunReport buildReport(const std::vector<ItemRecord>& items, const RunInfo& run) {
    const RunDescription description = describeRun(run.manifest);
    RunReport r;
    r.runId = run.runId;
    r.experiment = description.name;
    r.kernels = description.kernels;
    r.items = static_cast<int64_t>(items.size());
    r.environment = environmentOf(run.manifest);
    r.mixedEnvironments = run.manifest.value("mixed_environments", json());
    r.cpuModel = creatorCpuModel(run.manifest);
    r.study = summarizeStudy(items);
    return r;
}

namespace {

std::optional<bool> disagreeIn(const ItemResults& r, const std::string& precision) {
    if (!r.fixedPrefix2x2) return std::nullopt;
    const auto cell = r.fixedPrefix2x2->byPrecision.find(precision);
    return cell == r.fixedPrefix2x2->byPrecision.end() ? std::nullopt : std::optional<bool>(cell->second.disagree);
}

// The 2x2's precisions beyond the study's bf16 and fp32 that any item compared, in
// precisionNames()' order.
std::vector<std::string> otherPrecisions(const std::vector<ItemRecord>& items) {
    std::set<std::string> seen;
    for (const auto& it : items)
        if (it.results.fixedPrefix2x2)
            for (const auto& [precision, cell] : it.results.fixedPrefix2x2->byPrecision) seen.insert(precision);
    std::vector<std::string> out;
    for (const std::string& precision : precisionsInReadingOrder(seen))
        if (precision != "bf16" && precision != "fp32") out.push_back(precision);
    return out;
}

}  // namespace

std::string itemsCsv(const std::vector<ItemRecord>& items) {
    std::ostringstream s;
    // The other precisions' columns come last, so the study's columns keep their places.
    const std::vector<std::string> others = otherPrecisions(items);
    s << "item_id,status,boundary,suffix_equal,first_divergence,margin_at_divergence,correct_live,correct_prefill,"
         "replica_live_exact,replica_prefill_exact,bridge_exact,disagree_bf16,disagree_fp32,transplant_prefill_follows_"
         "live,"
         "transplant_live_follows_prefill,localize_layers,audit_reproduced,seconds";
    for (const std::string& precision : others) s << ",disagree_" << precision;
    s << '\n';
    for (const auto& it : items) {
        const ItemResults& r = it.results;
        const MatchedResult* m = r.matched ? &*r.matched : nullptr;
        const auto* t = r.transplant ? &*r.transplant : nullptr;
        std::string layers;
        if (r.localize)
            for (const int64_t l : r.localize->layers) layers += (layers.empty() ? "" : " ") + std::to_string(l);
        s << '"' << it.itemId << "\"," << itemStatusName(it.status) << ','
          << csvField(r.trace ? r.trace->boundary : std::nullopt) << ',' << csvFlag(m, &MatchedResult::suffixEqual)
          << ',' << csvField(m ? m->firstDivergence : std::nullopt) << ','
          << csvField(m && m->liveAtDivergence ? std::optional<double>(m->liveAtDivergence->margin) : std::nullopt)
          << ',' << csvFlag(m, &MatchedResult::correctLive) << ',' << csvFlag(m, &MatchedResult::correctPrefill) << ','
          << csvFlag(m, &MatchedResult::replicaLiveExact) << ',' << csvFlag(m, &MatchedResult::replicaPrefillExact)
          << ',' << csvField(r.bridge ? std::optional<bool>(r.bridge->exact) : std::nullopt) << ','
          << csvField(disagreeIn(r, "bf16")) << ',' << csvField(disagreeIn(r, "fp32")) << ','
          << csvField(t ? std::optional<bool>(t->prefillFromLive.followsDonor) : std::nullopt) << ','
          << csvField(t ? std::optional<bool>(t->liveFromPrefill.followsDonor) : std::nullopt) << ',' << layers << ','
          << csvField(r.audit ? std::optional<bool>(r.audit->reproduced) : std::nullopt) << ',' << it.seconds;
        for (const std::string& precision : others) s << ',' << csvField(disagreeIn(r, precision));
        s << '\n';
    }
    return s.str();
}

}  // namespace kvscope::experiments
