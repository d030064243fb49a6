// SPDX-License-Identifier: MIT
#include "experiments/report.h"

#include "experiments/manifest.h"

#include "core/model/numerics.h"
#include "core/stats/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kvscope::experiments {
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

json toJson(const Quantiles& q) {
    if (q.n == 0) return {{"n", 0}};
    return {{"n", q.n}, {"min", q.min}, {"p10", q.p10}, {"median", q.median}, {"p90", q.p90}, {"max", q.max}};
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

json toJson(const MatchedSummary& t) {
    json j = {{"n", t.n},
              {"no_boundary", t.noBoundary},
              {"suffix_differ", t.suffixDiffer},
              {"label_differ", t.labelDiffer},
              {"replicas_exact", {{"live", t.replicasLive}, {"prefill", t.replicasPrefill}}},
              {"margins",
               {{"at_divergence", toJson(t.marginsAtDivergence)}, {"non_divergent", toJson(t.marginsNonDivergent)}}},
              {"first_divergence", toJson(t.firstDivergence)}};
    if (!t.accuracy) return j;
    const PairedAccuracy& a = *t.accuracy;
    j["accuracy_live"] = a.live;
    j["accuracy_prefill"] = a.prefill;
    j["accuracy_diff"] = a.diff;
    j["accuracy_diff_ci"] = {a.bootstrapCi.lower, a.bootstrapCi.upper};
    j["accuracy_diff_newcombe_ci"] = {a.newcombeCi.lower, a.newcombeCi.upper};
    j["mcnemar_p"] = a.mcnemarP;
    return j;
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

// The precisions of a report's 2x2 in the order a reader expects: bf16 and fp32 first, then the rest.
std::vector<std::string> precisionsInOrder(const json& cells) {
    std::vector<std::string> out;
    for (const std::string& name : precisionNames())
        if (cells.contains(name)) out.push_back(name);
    for (const auto& [name, row] : cells.items())
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    return out;
}

json toJson(const DisagreementRow& r) {
    json j = {{"n", r.n}, {"disagree", r.disagree}};
    if (!r.wilson) return j;
    j["rate"] = fraction(r.disagree, r.n);
    j["wilson_lower"] = r.wilson->lower;
    j["wilson_upper"] = r.wilson->upper;
    return j;
}

// {"n": items where the protocol ran, name: those where `flag` holds}.
template <typename Result>
json countFlag(const std::vector<ItemRecord>& items, std::optional<Result> ItemResults::* protocol, bool Result::* flag,
               const char* name) {
    int64_t n = 0, k = 0;
    for (const auto& item : items)
        if (const auto& result = item.results.*protocol) {
            ++n;
            k += (*result).*flag;
        }
    return {{"n", n}, {name, k}};
}

json transplantTable(const std::vector<ItemRecord>& items) {
    int64_t items_ = 0, intoPrefill = 0, intoLive = 0;
    for (const auto& item : items) {
        if (!item.results.transplant) continue;
        const TransplantResult& t = *item.results.transplant;
        ++items_;
        intoPrefill += t.prefillFromLive.followsDonor;
        intoLive += t.liveFromPrefill.followsDonor;
    }
    return {{"n", 2 * items_},
            {"follows_donor", intoPrefill + intoLive},
            {"items", items_},
            {"prefill_from_live", {{"n", items_}, {"follows_donor", intoPrefill}}},
            {"live_from_prefill", {{"n", items_}, {"follows_donor", intoLive}}}};
}

json localizeTable(const std::vector<ItemRecord>& items) {
    json needed = json::array(), rows = json::array();
    int64_t n = 0;
    for (const auto& item : items) {
        if (!item.results.localize) continue;
        ++n;
        const LocalizeResult& l = *item.results.localize;
        if (!l.found) {
            rows.push_back({{"item", item.itemId}, {"found", false}});
            continue;
        }
        needed.push_back(l.layers);
        rows.push_back({{"item", item.itemId}, {"found", true}, {"layers", l.layers}, {"kv", kvPartsName(l.parts)}});
    }
    return {{"n", n}, {"layers_needed", needed}, {"items", rows}};
}

// The batch protocol per kernel set and batch size: items compared, logits and caches bit-equal to
// alone, greedy suffixes that split, where (generated step) and at what margin, and the first item's
// first differing prefill op (the locator's answer for that size).
json batchTable(const std::vector<ItemRecord>& items) {
    json out = json::object();
    std::map<std::string, std::map<int64_t, std::vector<std::pair<std::string, BatchCell>>>> cells;
    for (const auto& item : items)
        if (item.results.batch)
            for (const auto& [kernels, sizes] : item.results.batch->byKernels)
                for (const auto& [size, cell] : sizes) cells[kernels][size].emplace_back(item.itemId, cell);
    for (const auto& [kernels, sizes] : cells)
        for (const auto& [size, rows] : sizes) {
            int64_t logits = 0, caches = 0, split = 0;
            std::vector<double> at, margins;
            json op = nullptr;
            for (const auto& [id, c] : rows) {
                logits += c.logitsEqual;
                caches += c.cacheEqual;
                if (c.firstDivergence) {
                    ++split;
                    at.push_back(static_cast<double>(*c.firstDivergence));
                    if (c.marginAtDivergence) margins.push_back(*c.marginAtDivergence);
                }
                if (op.is_null() && c.firstDifferingOp) op = {{"item", id}, {"op", *c.firstDifferingOp}};
            }
            out[kernels][std::to_string(size)] = {{"n", rows.size()},
                                                  {"logits_equal", logits},
                                                  {"cache_equal", caches},
                                                  {"suffix_split", split},
                                                  {"first_divergence", toJson(quantilesOf(at))},
                                                  {"margin_at_divergence", toJson(quantilesOf(margins))},
                                                  {"first_differing_op", op}};
        }
    return out;
}

std::string batchMarkdown(const json& batch) {
    if (batch.empty()) return "";
    std::ostringstream s;
    s << "## batch (alone vs inside a left-padded batch)\n\n| kernels | batch size | n | logits bit-equal | prompt "
         "K/V bit-equal | greedy suffixes split | first divergence (median) | margin there (median) | first "
         "differing op (item) |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& [kernels, sizes] : batch.items())
        for (const auto& [size, row] : sizes.items()) {
            const json& op = row["first_differing_op"];
            s << "| " << kernels << " | " << size << " | " << row["n"] << " | " << row["logits_equal"] << " | "
              << row["cache_equal"] << " | " << row["suffix_split"] << " | "
              << (row["first_divergence"].contains("median") ? row["first_divergence"]["median"].dump() : "-") << " | "
              << (row["margin_at_divergence"].contains("median") ? row["margin_at_divergence"]["median"].dump() : "-")
              << " | "
              << (op.is_null() ? std::string("-")
                               : op["op"].get<std::string>() + " (" + op["item"].get<std::string>() + ")")
              << " |\n";
        }
    return s.str();
}

// A CSV cell: empty where the value is absent; numbers and booleans as JSON writes them.
template <typename T>
std::string csvField(const std::optional<T>& v) {
    return v ? json(*v).dump() : std::string();
}

std::string csvFlag(const MatchedResult* m, bool MatchedResult::* flag) {
    return csvField(m ? std::optional<bool>(m->*flag) : std::nullopt);
}

std::string percentText(const json& fraction) {
    return fraction.is_number() ? fixedText(100 * fraction.get<double>(), 1) + "%" : "-";
}

// Item time from the ledger (each item's own wall time, as the run measured it).
json timeTable(const std::vector<ItemRecord>& items) {
    double total = 0, split = 0;
    int64_t tokens = 0, splitItems = 0;
    std::vector<double> seconds;
    for (const auto& item : items) {
        total += item.seconds;
        tokens += item.tokens;
        seconds.push_back(item.seconds);
        if (item.results.divergent()) split += item.seconds, ++splitItems;
    }
    const auto n = static_cast<int64_t>(items.size());
    auto mean = [](double sum, int64_t k) { return k ? json(sum / static_cast<double>(k)) : json(); };
    return {{"items", n},
            {"seconds", total},
            {"seconds_per_item", toJson(quantilesOf(seconds))},
            {"mean_seconds_per_item", mean(total, n)},
            {"mean_seconds_per_divergent_item", mean(split, splitItems)},
            {"mean_seconds_per_other_item", mean(total - split, n - splitItems)},
            {"tokens_per_second", total > 0 ? json(static_cast<double>(tokens) / total) : json()}};
}

std::string timeMarkdown(const json& t) {
    std::ostringstream s;
    s << "\n## time (each item's own wall time)\n\n| measure | value |\n|---|---|\n"
      << "| items, time in all (h:mm:ss) | " << t["items"] << ", " << clockTime(t["seconds"].get<double>()) << " |\n"
      << "| seconds per item: mean (median) | " << fixedText(t["mean_seconds_per_item"], 1) << " ("
      << fixedText(t["seconds_per_item"].value("median", json()), 1) << ") |\n"
      << "| seconds per item whose suffixes differ / per other item | "
      << fixedText(t["mean_seconds_per_divergent_item"], 1) << " / " << fixedText(t["mean_seconds_per_other_item"], 1)
      << " |\n"
      << "| tokens per second (trace, both continuations, prefix) | " << fixedText(t["tokens_per_second"], 1) << " |\n";
    return s.str();
}

json stepHistogramJson(const std::vector<HistogramBar>& bars) {
    json out = json::array();
    for (const HistogramBar& b : bars)
        out.push_back(
            {{"from", static_cast<int64_t>(b.lower)}, {"to", static_cast<int64_t>(b.upper)}, {"count", b.count}});
    return out;
}

// The first divergence's histogram as a table with a bar of blocks per row, longest bar 30 wide.
std::string firstDivergenceMarkdown(const json& q) {
    std::ostringstream s;
    s << "\n### first divergence (generated step where the suffixes first differ)\n\n";
    if (q["n"] == 0) return s.str() + "No item diverged.\n";
    auto step = [&](const char* key) { return std::to_string(q[key].get<int64_t>()); };
    s << "n " << q["n"] << ", median " << step("median") << ", p10 " << step("p10") << ", p90 " << step("p90")
      << ", range " << step("min") << "-" << step("max") << "\n\n| steps | items | |\n|---|---|---|\n";
    int highest = 1;
    for (const auto& bar : q["histogram"]) highest = std::max(highest, bar["count"].get<int>());
    for (const auto& bar : q["histogram"]) {
        const auto from = bar["from"].get<int64_t>(), last = bar["to"].get<int64_t>() - 1;
        const int count = bar["count"].get<int>();
        std::string blocks;
        for (int i = 0; i < (count * 30 + highest - 1) / highest; ++i) blocks += "\u2588";
        s << "| " << from << (last > from ? "-" + std::to_string(last) : std::string()) << " | " << count << " | "
          << blocks << " |\n";
    }
    return s.str();
}

// Where the run's bits came from, and a warning where a merge mixed environments.
std::string environmentMarkdown(const json& r) {
    std::string text = "Ran on " + environmentText(r.value("environment", json())) + ".\n\n";
    const json mixed = r.value("mixed_environments", json());
    if (mixed.is_array()) {
        text += "**Mixed environments** (`ledger merge --allow-mixed-environments`): this run's items ran on " +
                std::to_string(mixed.size()) + " environments, whose bits may differ:\n\n";
        for (const auto& e : mixed) text += "- " + environmentText(e) + "\n";
        text += "\n";
    }
    return text;
}

}  // namespace

std::string fixedText(const json& x, int digits) {
    if (!x.is_number()) return "-";
    std::ostringstream o;
    o.precision(digits);
    o << std::fixed << x.get<double>();
    return o.str();
}

std::string clockTime(double seconds) {
    const auto total = std::llround(seconds);
    char text[32];
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
    return text;
}

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

StudySummary summarizeStudy(const std::vector<ItemRecord>& items) {
    return {summarizeMatched(items), disagreementsByPrecision(items)};
}

namespace {

// Every precision's row; bf16 and fp32 always (n 0 where the run did not compare them), the report's
// contract since the study.
json fixedPrefixJson(const std::map<std::string, DisagreementRow>& rows) {
    json out = {{"bf16", toJson(DisagreementRow{})}, {"fp32", toJson(DisagreementRow{})}};
    for (const auto& [precision, row] : rows) out[precision] = toJson(row);
    return out;
}

}  // namespace

json buildReport(const std::vector<ItemRecord>& items, const RunInfo& run) {
    const StudySummary study = summarizeStudy(items);
    json matched = toJson(study.matched);
    matched["first_divergence"]["histogram"] = stepHistogramJson(histogramOf(items, ItemMeasure::FirstDivergence, 16));
    return {{"run", run.runId},
            {"experiment", describeRun(run.manifest).name},
            {"kernels", kernelsName(describeRun(run.manifest).kernels)},
            {"environment", environmentOf(run.manifest)},
            {"mixed_environments", run.manifest.value("mixed_environments", json())},
            {"items", items.size()},
            {"matched", matched},
            {"fixed_prefix_2x2", fixedPrefixJson(study.fixedPrefix)},
            {"bridge", countFlag(items, &ItemResults::bridge, &BridgeResult::exact, "exact")},
            {"audit", countFlag(items, &ItemResults::audit, &AuditResult::reproduced, "reproduced")},
            {"transplant", transplantTable(items)},
            {"localize", localizeTable(items)},
            {"batch", batchTable(items)},
            {"time", timeTable(items)}};
}

namespace {

// The matched table with the accuracy rows where answers were compared.
std::string matchedMarkdown(const json& m) {
    std::ostringstream s;
    s << "## matched (live vs one-shot prefill of the same prefix)\n\n| measure | value |\n|---|---|\n"
      << "| items compared | " << m["n"] << " |\n| trace never reached the boundary | " << m["no_boundary"] << " |\n"
      << "| suffixes differ | " << m["suffix_differ"] << " / " << m["n"] << " |\n"
      << "| correctness labels differ | " << m["label_differ"] << " / " << m["n"] << " |\n"
      << "| exact replicas (live / prefill) | " << m["replicas_exact"]["live"] << " / "
      << m["replicas_exact"]["prefill"] << " |\n";
    if (m.contains("accuracy_live"))
        s << "| accuracy live / prefill | " << percentText(m["accuracy_live"]) << " / "
          << percentText(m["accuracy_prefill"]) << " |\n"
          << "| accuracy difference (95% paired bootstrap CI) | " << percentText(m["accuracy_diff"]) << " ["
          << percentText(m["accuracy_diff_ci"][0]) << ", " << percentText(m["accuracy_diff_ci"][1]) << "] |\n"
          << "| Newcombe paired CI | [" << percentText(m["accuracy_diff_newcombe_ci"][0]) << ", "
          << percentText(m["accuracy_diff_newcombe_ci"][1]) << "] |\n"
          << "| exact McNemar p | " << m["mcnemar_p"] << " |\n";
    s << "\n### top-1/top-2 margin (live side)\n\n| where | n | median | p10 | p90 |\n|---|---|---|---|---|\n";
    for (const char* where : {"at_divergence", "non_divergent"}) {
        const json& q = m["margins"][where];
        s << "| " << where << " | " << q["n"] << " | " << (q.contains("median") ? q["median"].dump() : "-") << " | "
          << (q.contains("p10") ? q["p10"].dump() : "-") << " | " << (q.contains("p90") ? q["p90"].dump() : "-")
          << " |\n";
    }
    s << firstDivergenceMarkdown(m["first_divergence"]);
    return s.str();
}

// The study's protocols after matched: the 2x2 per precision, then bridge, audit, transplant, localize.
std::string studyProtocolsMarkdown(const json& r) {
    std::ostringstream s;
    s << "\n## fixed_prefix_2x2 (construction x precision)\n\n| precision | n | decoded disagreements | Wilson 95% "
         "upper |\n|---|---|---|---|\n";
    for (const std::string& d : precisionsInOrder(r["fixed_prefix_2x2"])) {
        const json& row = r["fixed_prefix_2x2"][d];
        s << "| " << d << " | " << row["n"] << " | " << row["disagree"] << " | "
          << (row.contains("wilson_upper") ? percentText(row["wilson_upper"]) : "-") << " |\n";
    }
    s << "\n## bridge, audit, transplant, localize\n\n| protocol | result |\n|---|---|\n"
      << "| bridge: faithful rebuild == live, bit-exact | " << r["bridge"]["exact"] << " / " << r["bridge"]["n"]
      << " |\n"
      << "| audit: replay reproduced | " << r["audit"]["reproduced"] << " / " << r["audit"]["n"] << " |\n"
      << "| transplant: continuation follows its cache donor | " << r["transplant"]["follows_donor"] << " / "
      << r["transplant"]["n"] << " |\n"
      << "| localize: items with a sufficient layer range | " << r["localize"]["layers_needed"].size() << " / "
      << r["localize"]["n"] << " |\n";
    return s.str();
}

// Whether any of the study's protocols (all but batch) left a result: a batch-only run has none.
bool ranStudyProtocols(const json& r) {
    bool any = r["matched"]["n"] != 0 || r["matched"]["no_boundary"] != 0;
    for (const auto& [precision, row] : r["fixed_prefix_2x2"].items()) any = any || row["n"] != 0;
    for (const char* protocol : {"bridge", "audit", "transplant", "localize"}) any = any || r[protocol]["n"] != 0;
    return any;
}

}  // namespace

std::string reportMarkdown(const json& r) {
    std::ostringstream s;
    s << "# kvscope report: " << r["experiment"].get<std::string>() << " (run " << r["run"].get<std::string>() << ", "
      << r["items"] << " items, " << r["kernels"].get<std::string>() << " kernels)\n\n"
      << environmentMarkdown(r);
    const bool study = ranStudyProtocols(r);
    if (study) s << matchedMarkdown(r["matched"]) << studyProtocolsMarkdown(r);
    const std::string batch = batchMarkdown(r.value("batch", json::object()));
    if (!batch.empty()) s << (study ? "\n" : "") << batch;
    s << timeMarkdown(r["time"]);
    return s.str();
}

json comparisonReport(const std::vector<json>& reports) { return {{"runs", reports}}; }

std::string comparisonMarkdown(const json& comparison) {
    const json& runs = comparison["runs"];
    std::ostringstream s;
    s << "# kvscope report: runs side by side\n\n| measure |";
    for (const auto& r : runs)
        s << " " << r["experiment"].get<std::string>() << " (" << r["kernels"].get<std::string>() << " kernels) |";
    s << "\n|---|";
    for (std::size_t i = 0; i < runs.size(); ++i) s << "---|";
    s << "\n";
    auto row = [&](const std::string& measure, const auto& cell) {
        s << "| " << measure << " |";
        for (const auto& r : runs) s << " " << cell(r) << " |";
        s << "\n";
    };
    auto ratio = [](const json& k, const json& n) { return k.dump() + " / " + n.dump(); };
    row("run", [](const json& r) { return r["run"].get<std::string>(); });
    row("environment", [](const json& r) {
        const bool mixed = r.value("mixed_environments", json()).is_array();
        return environmentText(r.value("environment", json())) + (mixed ? " (mixed)" : "");
    });
    row("suffixes differ (live vs prefill)",
        [&](const json& r) { return ratio(r["matched"]["suffix_differ"], r["matched"]["n"]); });
    row("correctness labels differ",
        [&](const json& r) { return ratio(r["matched"]["label_differ"], r["matched"]["n"]); });
    auto median = [](const json& q) { return q.contains("median") ? q["median"].dump() : std::string("-"); };
    row("first divergence step, median", [&](const json& r) {
        const json& q = r["matched"]["first_divergence"];
        return q.contains("median") ? std::to_string(q["median"].get<int64_t>()) : std::string("-");
    });
    row("top-1/top-2 margin at divergence, median",
        [&](const json& r) { return median(r["matched"]["margins"]["at_divergence"]); });
    row("accuracy live / prefill", [&](const json& r) {
        return percentText(r["matched"].value("accuracy_live", json())) + " / " +
               percentText(r["matched"].value("accuracy_prefill", json()));
    });
    row("exact replicas (live / prefill)", [&](const json& r) {
        return r["matched"]["replicas_exact"]["live"].dump() + " / " + r["matched"]["replicas_exact"]["prefill"].dump();
    });
    row("bridge: faithful rebuild == live",
        [&](const json& r) { return ratio(r["bridge"]["exact"], r["bridge"]["n"]); });
    for (const char* d : {"bf16", "fp32"})  // the study's two; a run's other precisions are in its own report
        row(std::string("fixed_prefix_2x2 ") + d + ": decoded disagreements",
            [&](const json& r) { return ratio(r["fixed_prefix_2x2"][d]["disagree"], r["fixed_prefix_2x2"][d]["n"]); });
    row("audit: replay reproduced", [&](const json& r) { return ratio(r["audit"]["reproduced"], r["audit"]["n"]); });
    row("transplant: follows its cache donor",
        [&](const json& r) { return ratio(r["transplant"]["follows_donor"], r["transplant"]["n"]); });
    row("seconds per item (mean)", [](const json& r) {
        const json mean = r["time"]["mean_seconds_per_item"];
        return fixedText(mean, mean.is_number() && mean.get<double>() < 10 ? 1 : 0);
    });
    return s.str();
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
    json seen = json::object();
    for (const auto& it : items)
        if (it.results.fixedPrefix2x2)
            for (const auto& [precision, cell] : it.results.fixedPrefix2x2->byPrecision) seen[precision] = true;
    std::vector<std::string> out;
    for (const std::string& precision : precisionsInOrder(seen))
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
