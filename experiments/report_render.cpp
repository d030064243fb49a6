// SPDX-License-Identifier: MIT
// A run's report written out: its JSON (the keys report.h lists) and its Markdown, both from the typed
// RunReport; numbers are printed as the JSON form prints them, so the two always agree.
#include "experiments/report.h"

#include "experiments/manifest.h"

#include "core/model/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace kvscope::experiments {
namespace {

using nlohmann::json;

double fraction(int64_t k, int64_t n) { return n ? static_cast<double>(k) / static_cast<double>(n) : 0.0; }

// A double as the report's JSON writes it ("0.125", "72.0").
std::string jsonNumber(double x) { return json(x).dump(); }

std::string percentText(double fraction) { return fixedText(100 * fraction, 1) + "%"; }

// ---- JSON ----------------------------------------------------------------------------------------

json toJson(const Quantiles& q) {
    if (q.n == 0) return {{"n", 0}};
    return {{"n", q.n}, {"min", q.min}, {"p10", q.p10}, {"median", q.median}, {"p90", q.p90}, {"max", q.max}};
}

json stepHistogramJson(const std::vector<HistogramBar>& bars) {
    json out = json::array();
    for (const HistogramBar& b : bars)
        out.push_back(
            {{"from", static_cast<int64_t>(b.lower)}, {"to", static_cast<int64_t>(b.upper)}, {"count", b.count}});
    return out;
}

json toJson(const MatchedSummary& t) {
    json firstDivergence = toJson(t.firstDivergence);
    firstDivergence["histogram"] = stepHistogramJson(t.firstDivergenceBars);
    json j = {{"n", t.n},
              {"no_boundary", t.noBoundary},
              {"suffix_differ", t.suffixDiffer},
              {"label_differ", t.labelDiffer},
              {"replicas_exact", {{"live", t.replicasLive}, {"prefill", t.replicasPrefill}}},
              {"margins",
               {{"at_divergence", toJson(t.marginsAtDivergence)}, {"non_divergent", toJson(t.marginsNonDivergent)}}},
              {"first_divergence", firstDivergence}};
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

json toJson(const DisagreementRow& r) {
    json j = {{"n", r.n}, {"disagree", r.disagree}};
    if (!r.wilson) return j;
    j["rate"] = fraction(r.disagree, r.n);
    j["wilson_lower"] = r.wilson->lower;
    j["wilson_upper"] = r.wilson->upper;
    return j;
}

// Every precision's row; bf16 and fp32 always (n 0 where the run did not compare them), the report's
// contract since the study.
json fixedPrefixJson(const std::map<std::string, DisagreementRow>& rows) {
    json out = {{"bf16", toJson(DisagreementRow{})}, {"fp32", toJson(DisagreementRow{})}};
    for (const auto& [precision, row] : rows) out[precision] = toJson(row);
    return out;
}

json transplantJson(const TransplantSummary& t) {
    return {{"n", 2 * t.items},
            {"follows_donor", t.prefillFollowsLive + t.liveFollowsPrefill},
            {"items", t.items},
            {"prefill_from_live", {{"n", t.items}, {"follows_donor", t.prefillFollowsLive}}},
            {"live_from_prefill", {{"n", t.items}, {"follows_donor", t.liveFollowsPrefill}}}};
}

json localizeJson(const std::vector<LocalizeRow>& rows) {
    json needed = json::array(), items = json::array();
    for (const LocalizeRow& row : rows) {
        const LocalizeResult& l = row.result;
        if (!l.found) {
            items.push_back({{"item", row.itemId}, {"found", false}});
            continue;
        }
        needed.push_back(l.layers);
        items.push_back({{"item", row.itemId}, {"found", true}, {"layers", l.layers}, {"kv", kvPartsName(l.parts)}});
    }
    return {{"n", rows.size()}, {"layers_needed", needed}, {"items", items}};
}

json batchJson(const std::map<std::string, std::map<int64_t, BatchRow>>& batch) {
    json out = json::object();
    for (const auto& [kernels, sizes] : batch)
        for (const auto& [size, row] : sizes) {
            const auto& op = row.firstDifferingOp;
            out[kernels][std::to_string(size)] = {
                {"n", row.n},
                {"logits_equal", row.logitsEqual},
                {"cache_equal", row.cacheEqual},
                {"suffix_split", row.suffixSplit},
                {"first_divergence", toJson(row.firstDivergence)},
                {"margin_at_divergence", toJson(row.marginAtDivergence)},
                {"first_differing_op", op ? json{{"item", op->first}, {"op", op->second}} : json()}};
        }
    return out;
}

// null where no item counts: a mean of nothing.
json meanOrNull(double sum, int64_t k) { return k ? json(sum / static_cast<double>(k)) : json(); }

// Tokens per second of item time (the trace, both continuations, the prefix); null without time.
json tokensPerSecond(const TimeSummary& t) {
    return t.seconds > 0 ? json(static_cast<double>(t.tokens) / t.seconds) : json();
}

json timeJson(const TimeSummary& t) {
    return {{"items", t.items},
            {"seconds", t.seconds},
            {"seconds_per_item", toJson(t.secondsPerItem)},
            {"mean_seconds_per_item", meanOrNull(t.seconds, t.items)},
            {"mean_seconds_per_divergent_item", meanOrNull(t.divergentSeconds, t.divergentItems)},
            {"mean_seconds_per_other_item", meanOrNull(t.seconds - t.divergentSeconds, t.items - t.divergentItems)},
            {"tokens_per_second", tokensPerSecond(t)}};
}

// ---- Markdown ------------------------------------------------------------------------------------

std::string count(int64_t k, int64_t n) { return std::to_string(k) + " / " + std::to_string(n); }

// A quantile's median, "-" where nothing was measured.
std::string medianText(const Quantiles& q) { return q.n ? jsonNumber(q.median) : "-"; }

// The first divergence's histogram as a table with a bar of blocks per row, longest bar 30 wide.
std::string firstDivergenceMarkdown(const MatchedSummary& m) {
    std::ostringstream s;
    s << "\n### first divergence (generated step where the suffixes first differ)\n\n";
    const Quantiles& q = m.firstDivergence;
    if (q.n == 0) return s.str() + "No item diverged.\n";
    auto step = [](double x) { return std::to_string(static_cast<int64_t>(x)); };
    s << "n " << q.n << ", median " << step(q.median) << ", p10 " << step(q.p10) << ", p90 " << step(q.p90)
      << ", range " << step(q.min) << "-" << step(q.max) << "\n\n| steps | items | |\n|---|---|---|\n";
    int highest = 1;
    for (const HistogramBar& bar : m.firstDivergenceBars) highest = std::max(highest, bar.count);
    for (const HistogramBar& bar : m.firstDivergenceBars) {
        const auto from = static_cast<int64_t>(bar.lower), last = static_cast<int64_t>(bar.upper) - 1;
        std::string blocks;
        for (int i = 0; i < (bar.count * 30 + highest - 1) / highest; ++i) blocks += "\u2588";
        s << "| " << from << (last > from ? "-" + std::to_string(last) : std::string()) << " | " << bar.count << " | "
          << blocks << " |\n";
    }
    return s.str();
}

// The matched table with the accuracy rows where answers were compared.
std::string matchedMarkdown(const MatchedSummary& m) {
    std::ostringstream s;
    s << "## matched (live vs one-shot prefill of the same prefix)\n\n| measure | value |\n|---|---|\n"
      << "| items compared | " << m.n << " |\n| trace never reached the boundary | " << m.noBoundary << " |\n"
      << "| suffixes differ | " << count(m.suffixDiffer, m.n) << " |\n"
      << "| correctness labels differ | " << count(m.labelDiffer, m.n) << " |\n"
      << "| exact replicas (live / prefill) | " << m.replicasLive << " / " << m.replicasPrefill << " |\n";
    if (m.accuracy) {
        const PairedAccuracy& a = *m.accuracy;
        s << "| accuracy live / prefill | " << percentText(a.live) << " / " << percentText(a.prefill) << " |\n"
          << "| accuracy difference (95% paired bootstrap CI) | " << percentText(a.diff) << " ["
          << percentText(a.bootstrapCi.lower) << ", " << percentText(a.bootstrapCi.upper) << "] |\n"
          << "| Newcombe paired CI | [" << percentText(a.newcombeCi.lower) << ", " << percentText(a.newcombeCi.upper)
          << "] |\n"
          << "| exact McNemar p | " << jsonNumber(a.mcnemarP) << " |\n";
    }
    s << "\n### top-1/top-2 margin (live side)\n\n| where | n | median | p10 | p90 |\n|---|---|---|---|---|\n";
    for (const auto& [where, q] : {std::pair<const char*, const Quantiles*>{"at_divergence", &m.marginsAtDivergence},
                                   {"non_divergent", &m.marginsNonDivergent}})
        s << "| " << where << " | " << q->n << " | " << medianText(*q) << " | " << (q->n ? jsonNumber(q->p10) : "-")
          << " | " << (q->n ? jsonNumber(q->p90) : "-") << " |\n";
    s << firstDivergenceMarkdown(m);
    return s.str();
}

// The study's protocols after matched: the 2x2 per precision, then bridge, audit, transplant, localize.
std::string studyProtocolsMarkdown(const StudySummary& study) {
    std::ostringstream s;
    s << "\n## fixed_prefix_2x2 (construction x precision)\n\n| precision | n | decoded disagreements | Wilson 95% "
         "upper |\n|---|---|---|---|\n";
    std::map<std::string, DisagreementRow> rows = {{"bf16", {}}, {"fp32", {}}};
    for (const auto& [precision, row] : study.fixedPrefix) rows[precision] = row;
    std::set<std::string> names;
    for (const auto& [precision, row] : rows) names.insert(precision);
    for (const std::string& precision : precisionsInReadingOrder(names)) {
        const DisagreementRow& row = rows[precision];
        s << "| " << precision << " | " << row.n << " | " << row.disagree << " | "
          << (row.wilson ? percentText(row.wilson->upper) : "-") << " |\n";
    }
    const int64_t found = std::count_if(study.localize.begin(), study.localize.end(),
                                        [](const LocalizeRow& row) { return row.result.found; });
    s << "\n## bridge, audit, transplant, localize\n\n| protocol | result |\n|---|---|\n"
      << "| bridge: faithful rebuild == live, bit-exact | " << count(study.bridge.held, study.bridge.n) << " |\n"
      << "| audit: replay reproduced | " << count(study.audit.held, study.audit.n) << " |\n"
      << "| transplant: continuation follows its cache donor | "
      << count(study.transplant.prefillFollowsLive + study.transplant.liveFollowsPrefill, 2 * study.transplant.items)
      << " |\n"
      << "| localize: items with a sufficient layer range | "
      << count(found, static_cast<int64_t>(study.localize.size())) << " |\n";
    return s.str();
}

std::string batchMarkdown(const std::map<std::string, std::map<int64_t, BatchRow>>& batch) {
    if (batch.empty()) return "";
    std::ostringstream s;
    s << "## batch (alone vs inside a left-padded batch)\n\n| kernels | batch size | n | logits bit-equal | prompt "
         "K/V bit-equal | greedy suffixes split | first divergence (median) | margin there (median) | first "
         "differing op (item) |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& [kernels, sizes] : batch) {
        // JSON orders the sizes as text ("16" before "2"), and the table has always followed it.
        std::map<std::string, const BatchRow*> bySizeName;
        for (const auto& [size, row] : sizes) bySizeName[std::to_string(size)] = &row;
        for (const auto& [size, row] : bySizeName) {
            const auto& op = row->firstDifferingOp;
            s << "| " << kernels << " | " << size << " | " << row->n << " | " << row->logitsEqual << " | "
              << row->cacheEqual << " | " << row->suffixSplit << " | " << medianText(row->firstDivergence) << " | "
              << medianText(row->marginAtDivergence) << " | "
              << (op ? op->second + " (" + op->first + ")" : std::string("-")) << " |\n";
        }
    }
    return s.str();
}

std::string timeMarkdown(const TimeSummary& t) {
    std::ostringstream s;
    s << "\n## time (each item's own wall time)\n\n| measure | value |\n|---|---|\n"
      << "| items, time in all (h:mm:ss) | " << t.items << ", " << clockTime(t.seconds) << " |\n"
      << "| seconds per item: mean (median) | " << fixedText(meanOrNull(t.seconds, t.items), 1) << " ("
      << (t.secondsPerItem.n ? fixedText(t.secondsPerItem.median, 1) : "-") << ") |\n"
      << "| seconds per item whose suffixes differ / per other item | "
      << fixedText(meanOrNull(t.divergentSeconds, t.divergentItems), 1) << " / "
      << fixedText(meanOrNull(t.seconds - t.divergentSeconds, t.items - t.divergentItems), 1) << " |\n"
      << "| tokens per second (trace, both continuations, prefix) | " << fixedText(tokensPerSecond(t), 1) << " |\n";
    return s.str();
}

// Where the run's bits came from, and a warning where a merge mixed environments.
std::string environmentMarkdown(const RunReport& r) {
    std::string text = "Ran on " + environmentText(r.environment) + ".\n\n";
    if (r.mixedEnvironments.is_array()) {
        text += "**Mixed environments** (`ledger merge --allow-mixed-environments`): this run's items ran on " +
                std::to_string(r.mixedEnvironments.size()) + " environments, whose bits may differ:\n\n";
        for (const auto& e : r.mixedEnvironments) text += "- " + environmentText(e) + "\n";
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

json toJson(const RunReport& r) {
    const StudySummary& study = r.study;
    return {{"run", r.runId},
            {"experiment", r.experiment},
            {"kernels", kernelsName(r.kernels)},
            {"environment", r.environment},
            {"cpu_model", r.cpuModel ? json(*r.cpuModel) : json()},
            {"mixed_environments", r.mixedEnvironments},
            {"items", r.items},
            {"matched", toJson(study.matched)},
            {"fixed_prefix_2x2", fixedPrefixJson(study.fixedPrefix)},
            {"bridge", {{"n", study.bridge.n}, {"exact", study.bridge.held}}},
            {"audit", {{"n", study.audit.n}, {"reproduced", study.audit.held}}},
            {"transplant", transplantJson(study.transplant)},
            {"localize", localizeJson(study.localize)},
            {"batch", batchJson(study.batch)},
            {"time", timeJson(study.time)}};
}

std::string reportMarkdown(const RunReport& r) {
    std::ostringstream s;
    s << "# kvscope report: " << r.experiment << " (run " << r.runId << ", " << r.items << " items, "
      << kernelsName(r.kernels) << " kernels)\n\n"
      << environmentMarkdown(r);
    const bool study = r.study.ranStudyProtocols();
    if (study) s << matchedMarkdown(r.study.matched) << studyProtocolsMarkdown(r.study);
    const std::string batch = batchMarkdown(r.study.batch);
    if (!batch.empty()) s << (study ? "\n" : "") << batch;
    s << timeMarkdown(r.study.time);
    return s.str();
}

json comparisonReport(const std::vector<RunReport>& reports) {
    json runs = json::array();
    for (const RunReport& r : reports) runs.push_back(toJson(r));
    return {{"runs", runs}};
}

std::string comparisonMarkdown(const std::vector<RunReport>& runs) {
    std::ostringstream s;
    s << "# kvscope report: runs side by side\n\n| measure |";
    for (const RunReport& r : runs) s << " " << r.experiment << " (" << kernelsName(r.kernels) << " kernels) |";
    s << "\n|---|";
    for (std::size_t i = 0; i < runs.size(); ++i) s << "---|";
    s << "\n";
    auto row = [&](const std::string& measure, const auto& cell) {
        s << "| " << measure << " |";
        for (const RunReport& r : runs) s << " " << cell(r) << " |";
        s << "\n";
    };
    auto fixedPrefix = [](const RunReport& r, const std::string& precision) {
        const auto it = r.study.fixedPrefix.find(precision);
        return it == r.study.fixedPrefix.end() ? DisagreementRow{} : it->second;
    };
    row("run", [](const RunReport& r) { return r.runId; });
    row("environment", [](const RunReport& r) {
        return environmentText(r.environment) + (r.mixedEnvironments.is_array() ? " (mixed)" : "");
    });
    row("suffixes differ (live vs prefill)",
        [](const RunReport& r) { return count(r.study.matched.suffixDiffer, r.study.matched.n); });
    row("correctness labels differ",
        [](const RunReport& r) { return count(r.study.matched.labelDiffer, r.study.matched.n); });
    row("first divergence step, median", [](const RunReport& r) {
        const Quantiles& q = r.study.matched.firstDivergence;
        return q.n ? std::to_string(static_cast<int64_t>(q.median)) : std::string("-");
    });
    row("top-1/top-2 margin at divergence, median",
        [](const RunReport& r) { return medianText(r.study.matched.marginsAtDivergence); });
    row("accuracy live / prefill", [](const RunReport& r) {
        const auto& a = r.study.matched.accuracy;
        return a ? percentText(a->live) + " / " + percentText(a->prefill) : std::string("- / -");
    });
    row("exact replicas (live / prefill)", [](const RunReport& r) {
        return std::to_string(r.study.matched.replicasLive) + " / " + std::to_string(r.study.matched.replicasPrefill);
    });
    row("bridge: faithful rebuild == live",
        [](const RunReport& r) { return count(r.study.bridge.held, r.study.bridge.n); });
    for (const char* d : {"bf16", "fp32"})  // the study's two; a run's other precisions are in its own report
        row(std::string("fixed_prefix_2x2 ") + d + ": decoded disagreements", [&](const RunReport& r) {
            const DisagreementRow cell = fixedPrefix(r, d);
            return count(cell.disagree, cell.n);
        });
    row("audit: replay reproduced", [](const RunReport& r) { return count(r.study.audit.held, r.study.audit.n); });
    row("transplant: follows its cache donor", [](const RunReport& r) {
        const TransplantSummary& t = r.study.transplant;
        return count(t.prefillFollowsLive + t.liveFollowsPrefill, 2 * t.items);
    });
    row("seconds per item (mean)", [](const RunReport& r) {
        const json mean = meanOrNull(r.study.time.seconds, r.study.time.items);
        return fixedText(mean, mean.is_number() && mean.get<double>() < 10 ? 1 : 0);
    });
    return s.str();
}

}  // namespace kvscope::experiments
