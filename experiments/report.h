// SPDX-License-Identifier: MIT
#pragma once
// Tables of the study from a ledger run. The JSON keys below are a contract users' scripts rely on:
//   matched: n, suffix_differ, label_differ, accuracy_live, accuracy_prefill, accuracy_diff,
//            accuracy_diff_ci [lo, hi] (paired bootstrap, 10000 resamples, seed 0),
//            accuracy_diff_newcombe_ci, mcnemar_p, replicas_exact {live, prefill}, no_boundary,
//            margins {at_divergence, non_divergent} (quantiles),
//            first_divergence (quantiles of the generated step, and histogram [{from, to, count}]:
//            steps from <= step < to, over the divergent items)
//   fixed_prefix_2x2: {bf16|fp32: n, disagree, wilson_upper}
//   kernels ("torch" | "invariant")
//   environment (manifest.h's runEnvironment; null for older runs), mixed_environments (null, or every
//   environment a merged run's items ran on)
//   bridge {n, exact}   audit {n, reproduced}   transplant {n, follows_donor, ...}
//   localize {n, layers_needed: [[layers of item 1], ...], items: [...]}
//   time {items, seconds, seconds_per_item (quantiles), mean_seconds_per_item,
//         mean_seconds_per_divergent_item, mean_seconds_per_other_item, tokens_per_second}
// Proportions are fractions, not percent.
#include "experiments/ledger.h"

#include "core/stats/stats.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

namespace kvscope::experiments {

// The study's headline numbers as values: what the report's "matched" and "fixed_prefix_2x2" tables
// say, for readers that show them (the GUI's summary strip) without going through JSON.
struct Quantiles {
    int64_t n = 0;
    double min = 0, p10 = 0, median = 0, p90 = 0, max = 0;  // meaningful when n > 0
};
struct PairedAccuracy {
    double live = 0, prefill = 0, diff = 0;  // fractions; diff = live - prefill
    stats::Interval bootstrapCi, newcombeCi;
    double mcnemarP = 1;
};
struct MatchedSummary {
    int64_t n = 0, noBoundary = 0, suffixDiffer = 0, labelDiffer = 0, replicasLive = 0, replicasPrefill = 0;
    std::optional<PairedAccuracy> accuracy;  // none when n == 0
    Quantiles marginsAtDivergence, marginsNonDivergent;
    Quantiles firstDivergence;  // the generated step, over the divergent items
};
struct DisagreementRow {
    int64_t n = 0, disagree = 0;
    std::optional<stats::Interval> wilson;  // none when n == 0
};
struct StudySummary {
    MatchedSummary matched;
    std::map<std::string, DisagreementRow> fixedPrefix;  // precision name -> its row; bf16 and fp32 by default
};
StudySummary summarizeStudy(const std::vector<ItemRecord>& items);

// Per divergent item: the generated step where live and prefill first differ, and the live side's
// top-1/top-2 margin there.
enum class ItemMeasure { FirstDivergence, MarginAtDivergence };
// The value of `measure` for one item, if it diverged and the value was recorded.
std::optional<double> measureOf(const ItemRecord& item, ItemMeasure measure);

struct HistogramBar {
    double lower = 0, upper = 0;  // [lower, upper)
    int count = 0;
};
// Equal-width bars covering every divergent item's value: one per step for first divergence (wider
// when steps run past `maxBars`), `maxBars` bars from 0 to the largest margin for margins.
std::vector<HistogramBar> histogramOf(const std::vector<ItemRecord>& items, ItemMeasure measure, int maxBars = 24);

// A duration as H:MM:SS (rounded to the second), as the report and the CLI's progress print it.
std::string clockTime(double seconds);
// A report number with `digits` decimals; "-" where the report holds none (null).
std::string fixedText(const nlohmann::json& x, int digits);

nlohmann::json buildReport(const std::vector<ItemRecord>& items, const RunInfo& run);
std::string reportMarkdown(const nlohmann::json& report);
// Several runs' reports side by side (`kvscope report --compare`), e.g. the study with torch kernels
// next to the same study with invariant kernels: {"runs": [report, ...]} and one table.
nlohmann::json comparisonReport(const std::vector<nlohmann::json>& reports);
std::string comparisonMarkdown(const nlohmann::json& comparison);
std::string itemsCsv(const std::vector<ItemRecord>& items);

}  // namespace kvscope::experiments
