// SPDX-License-Identifier: MIT
#include "experiments/report.h"

#include "core/stats/stats.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvscope::experiments {
namespace {

using nlohmann::json;

json quantiles(std::vector<double> v) {
    if (v.empty()) return {{"n", 0}};
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[static_cast<std::size_t>(std::floor(f * static_cast<double>(v.size() - 1)))]; };
    return {{"n", v.size()},    {"min", v.front()}, {"p10", q(0.1)},
            {"median", q(0.5)}, {"p90", q(0.9)},    {"max", v.back()}};
}

double fraction(int64_t k, int64_t n) { return n ? static_cast<double>(k) / static_cast<double>(n) : 0.0; }

json matchedTable(const std::vector<ItemRecord>& items) {
    int64_t n = 0, suffixDiffer = 0, labelDiffer = 0, replicaLive = 0, replicaPrefill = 0, noBoundary = 0;
    std::vector<bool> live, prefill;
    std::vector<double> atDivergence, nonDivergent;
    for (const auto& item : items) {
        if (item.status == "no_boundary") ++noBoundary;
        if (!item.results.contains("matched")) continue;
        const json& m = item.results["matched"];
        ++n;
        suffixDiffer += !m["suffix_equal"].get<bool>();
        labelDiffer += m["correct_live"] != m["correct_prefill"];
        replicaLive += m["replica_live_exact"].get<bool>();
        replicaPrefill += m["replica_prefill_exact"].get<bool>();
        live.push_back(m["correct_live"]);
        prefill.push_back(m["correct_prefill"]);
        const auto margins = m["margins_live"].get<std::vector<double>>();
        const int64_t div = m["first_divergence"].is_null() ? static_cast<int64_t>(margins.size())
                                                            : m["first_divergence"].get<int64_t>();
        for (int64_t i = 0; i < std::min<int64_t>(div, static_cast<int64_t>(margins.size())); ++i)
            nonDivergent.push_back(margins[i]);
        if (!m["at_divergence"]["live"].is_null()) atDivergence.push_back(m["at_divergence"]["live"]["margin"]);
    }
    json t = {{"n", n},
              {"no_boundary", noBoundary},
              {"suffix_differ", suffixDiffer},
              {"label_differ", labelDiffer},
              {"replicas_exact", {{"live", replicaLive}, {"prefill", replicaPrefill}}},
              {"margins", {{"at_divergence", quantiles(atDivergence)}, {"non_divergent", quantiles(nonDivergent)}}}};
    if (n == 0) return t;
    const auto counts = stats::PairedCounts::from(live, prefill);
    const auto boot = stats::pairedBootstrap(live, prefill, 10000, 0);
    const auto newcombe = stats::newcombePaired(counts);
    t["accuracy_live"] = fraction(counts.bothRight + counts.onlyFirst, n);
    t["accuracy_prefill"] = fraction(counts.bothRight + counts.onlySecond, n);
    t["accuracy_diff"] = stats::accuracyDifference(counts);
    t["accuracy_diff_ci"] = {boot.lower, boot.upper};
    t["accuracy_diff_newcombe_ci"] = {newcombe.lower, newcombe.upper};
    t["mcnemar_p"] = stats::mcnemarExact(counts.onlyFirst, counts.onlySecond);
    return t;
}

json twoByTwoTable(const std::vector<ItemRecord>& items) {
    json t = json::object();
    for (const char* dtype : {"bf16", "fp32"}) {
        int64_t n = 0, disagree = 0;
        for (const auto& item : items)
            if (item.results.contains("fixed_prefix_2x2")) {
                ++n;
                disagree += item.results["fixed_prefix_2x2"][dtype]["disagree"].get<bool>();
            }
        json row = {{"n", n}, {"disagree", disagree}};
        if (n) {
            const auto w = stats::wilson(disagree, n);
            row["rate"] = fraction(disagree, n);
            row["wilson_lower"] = w.lower;
            row["wilson_upper"] = w.upper;
        }
        t[dtype] = row;
    }
    return t;
}

json countFlag(const std::vector<ItemRecord>& items, const char* protocol, const char* flag, const char* name) {
    int64_t n = 0, k = 0;
    for (const auto& item : items)
        if (item.results.contains(protocol)) {
            ++n;
            k += item.results[protocol][flag].get<bool>();
        }
    return {{"n", n}, {name, k}};
}

json transplantTable(const std::vector<ItemRecord>& items) {
    int64_t n = 0, follows = 0, intoPrefill = 0, intoLive = 0, items_ = 0;
    for (const auto& item : items) {
        if (!item.results.contains("transplant")) continue;
        const json& t = item.results["transplant"];
        ++items_;
        n += 2;
        intoPrefill += t["prefill_from_live"]["follows_donor"].get<bool>();
        intoLive += t["live_from_prefill"]["follows_donor"].get<bool>();
    }
    follows = intoPrefill + intoLive;
    return {{"n", n},
            {"follows_donor", follows},
            {"items", items_},
            {"prefill_from_live", {{"n", items_}, {"follows_donor", intoPrefill}}},
            {"live_from_prefill", {{"n", items_}, {"follows_donor", intoLive}}}};
}

json localizeTable(const std::vector<ItemRecord>& items) {
    json needed = json::array(), rows = json::array();
    int64_t n = 0;
    for (const auto& item : items) {
        if (!item.results.contains("localize")) continue;
        ++n;
        const json& l = item.results["localize"];
        if (!l["found"].get<bool>()) {
            rows.push_back({{"item", item.itemId}, {"found", false}});
            continue;
        }
        needed.push_back(l["layers"]);
        rows.push_back({{"item", item.itemId}, {"found", true}, {"layers", l["layers"]}, {"kv", l["kv"]}});
    }
    return {{"n", n}, {"layers_needed", needed}, {"items", rows}};
}

}  // namespace

json buildReport(const std::vector<ItemRecord>& items, const RunInfo& run) {
    const json& config = run.manifest.at("identity").at("config");
    const json model = config.value("model", json::object());
    return {{"run", run.runId},
            {"experiment", config.at("name")},
            {"kernels", model.value("kernels", "torch")},  // runs before --kernels existed used torch's
            {"items", items.size()},
            {"matched", matchedTable(items)},
            {"fixed_prefix_2x2", twoByTwoTable(items)},
            {"bridge", countFlag(items, "bridge", "exact", "exact")},
            {"audit", countFlag(items, "audit", "reproduced", "reproduced")},
            {"transplant", transplantTable(items)},
            {"localize", localizeTable(items)}};
}

std::string reportMarkdown(const json& r) {
    std::ostringstream s;
    auto pct = [](double x) {
        std::ostringstream o;
        o.precision(1);
        o << std::fixed << 100 * x << "%";
        return o.str();
    };
    const json& m = r["matched"];
    s << "# kvscope report: " << r["experiment"].get<std::string>() << " (run " << r["run"].get<std::string>() << ", "
      << r["items"] << " items, " << r["kernels"].get<std::string>()
      << " kernels)\n\n## matched (live vs one-shot prefill of the same prefix)\n\n| measure | value |\n|---|---|\n"
      << "| items compared | " << m["n"] << " |\n| trace never reached the boundary | " << m["no_boundary"] << " |\n"
      << "| suffixes differ | " << m["suffix_differ"] << " / " << m["n"] << " |\n"
      << "| correctness labels differ | " << m["label_differ"] << " / " << m["n"] << " |\n"
      << "| exact replicas (live / prefill) | " << m["replicas_exact"]["live"] << " / "
      << m["replicas_exact"]["prefill"] << " |\n";
    if (m.contains("accuracy_live"))
        s << "| accuracy live / prefill | " << pct(m["accuracy_live"]) << " / " << pct(m["accuracy_prefill"]) << " |\n"
          << "| accuracy difference (95% paired bootstrap CI) | " << pct(m["accuracy_diff"]) << " ["
          << pct(m["accuracy_diff_ci"][0]) << ", " << pct(m["accuracy_diff_ci"][1]) << "] |\n"
          << "| Newcombe paired CI | [" << pct(m["accuracy_diff_newcombe_ci"][0]) << ", "
          << pct(m["accuracy_diff_newcombe_ci"][1]) << "] |\n"
          << "| exact McNemar p | " << m["mcnemar_p"] << " |\n";
    s << "\n### top-1/top-2 margin (live side)\n\n| where | n | median | p10 | p90 |\n|---|---|---|---|---|\n";
    for (const char* where : {"at_divergence", "non_divergent"}) {
        const json& q = m["margins"][where];
        s << "| " << where << " | " << q["n"] << " | " << (q.contains("median") ? q["median"].dump() : "-") << " | "
          << (q.contains("p10") ? q["p10"].dump() : "-") << " | " << (q.contains("p90") ? q["p90"].dump() : "-")
          << " |\n";
    }
    s << "\n## fixed_prefix_2x2 (construction x precision)\n\n| precision | n | decoded disagreements | Wilson 95% "
         "upper |\n|---|---|---|---|\n";
    for (const char* d : {"bf16", "fp32"}) {
        const json& row = r["fixed_prefix_2x2"][d];
        s << "| " << d << " | " << row["n"] << " | " << row["disagree"] << " | "
          << (row.contains("wilson_upper") ? pct(row["wilson_upper"]) : "-") << " |\n";
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
    auto pct = [](const json& x) {
        if (!x.is_number()) return std::string("-");
        std::ostringstream o;
        o.precision(1);
        o << std::fixed << 100 * x.get<double>() << "%";
        return o.str();
    };
    row("run", [](const json& r) { return r["run"].get<std::string>(); });
    row("suffixes differ (live vs prefill)",
        [&](const json& r) { return ratio(r["matched"]["suffix_differ"], r["matched"]["n"]); });
    row("correctness labels differ",
        [&](const json& r) { return ratio(r["matched"]["label_differ"], r["matched"]["n"]); });
    row("accuracy live / prefill", [&](const json& r) {
        return pct(r["matched"].value("accuracy_live", json())) + " / " +
               pct(r["matched"].value("accuracy_prefill", json()));
    });
    row("exact replicas (live / prefill)", [&](const json& r) {
        return r["matched"]["replicas_exact"]["live"].dump() + " / " + r["matched"]["replicas_exact"]["prefill"].dump();
    });
    row("bridge: faithful rebuild == live",
        [&](const json& r) { return ratio(r["bridge"]["exact"], r["bridge"]["n"]); });
    for (const char* d : {"bf16", "fp32"})
        row(std::string("fixed_prefix_2x2 ") + d + ": decoded disagreements",
            [&](const json& r) { return ratio(r["fixed_prefix_2x2"][d]["disagree"], r["fixed_prefix_2x2"][d]["n"]); });
    row("audit: replay reproduced", [&](const json& r) { return ratio(r["audit"]["reproduced"], r["audit"]["n"]); });
    row("transplant: follows its cache donor",
        [&](const json& r) { return ratio(r["transplant"]["follows_donor"], r["transplant"]["n"]); });
    return s.str();
}

std::string itemsCsv(const std::vector<ItemRecord>& items) {
    std::ostringstream s;
    s << "item_id,status,boundary,suffix_equal,first_divergence,margin_at_divergence,correct_live,correct_prefill,"
         "replica_live_exact,replica_prefill_exact,bridge_exact,disagree_bf16,disagree_fp32,transplant_prefill_follows_"
         "live,"
         "transplant_live_follows_prefill,localize_layers,audit_reproduced,seconds\n";
    auto field = [](const json& j) {
        return j.is_null() ? std::string() : j.is_string() ? j.get<std::string>() : j.dump();
    };
    auto get = [](const json& r, std::initializer_list<const char*> path) {
        const json* at = &r;
        for (const char* key : path) {
            if (!at->is_object() || !at->contains(key)) return json();
            at = &(*at)[key];
        }
        return *at;
    };
    for (const auto& it : items) {
        const json& r = it.results;
        std::string layers;
        for (const auto& l : get(r, {"localize", "layers"})) layers += (layers.empty() ? "" : " ") + l.dump();
        s << '"' << it.itemId << "\"," << it.status << ',' << field(get(r, {"trace", "boundary"})) << ','
          << field(get(r, {"matched", "suffix_equal"})) << ',' << field(get(r, {"matched", "first_divergence"})) << ','
          << field(get(r, {"matched", "at_divergence", "live", "margin"})) << ','
          << field(get(r, {"matched", "correct_live"})) << ',' << field(get(r, {"matched", "correct_prefill"})) << ','
          << field(get(r, {"matched", "replica_live_exact"})) << ','
          << field(get(r, {"matched", "replica_prefill_exact"})) << ',' << field(get(r, {"bridge", "exact"})) << ','
          << field(get(r, {"fixed_prefix_2x2", "bf16", "disagree"})) << ','
          << field(get(r, {"fixed_prefix_2x2", "fp32", "disagree"})) << ','
          << field(get(r, {"transplant", "prefill_from_live", "follows_donor"})) << ','
          << field(get(r, {"transplant", "live_from_prefill", "follows_donor"})) << ',' << layers << ','
          << field(get(r, {"audit", "reproduced"})) << ',' << it.seconds << '\n';
    }
    return s.str();
}

}  // namespace kvscope::experiments
