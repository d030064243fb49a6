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
//   environment (manifest.h's runEnvironment; null for older runs), cpu_model (the machine that
//   created the run: "AMD EPYC (family 25, model 17)"; null where its manifest lacks it), mixed_environments (null, or every
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
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::experiments {

// The study as values: every table of the report (its JSON and Markdown are rendered from these),
// and what the GUI's summary strip shows.
struct Quantiles {
    int64_t n = 0;
    double min = 0, p10 = 0, median = 0, p90 = 0, max = 0;  // meaningful when n > 0
};
struct PairedAccuracy {
    double live = 0, prefill = 0, diff = 0;  // fractions; diff = live - prefill
    stats::Interval bootstrapCi, newcombeCi;
    double mcnemarP = 1;
};
struct HistogramBar {
    double lower = 0, upper = 0;  // [lower, upper)
    int count = 0;
};
struct MatchedSummary {
    int64_t n = 0, noBoundary = 0, suffixDiffer = 0, labelDiffer = 0, replicasLive = 0, replicasPrefill = 0;
    std::optional<PairedAccuracy> accuracy;  // none when n == 0
    Quantiles marginsAtDivergence, marginsNonDivergent;
    Quantiles firstDivergence;  // the generated step, over the divergent items
    std::vector<HistogramBar> firstDivergenceBars;  // at most 16 bars of whole steps
};
struct DisagreementRow {
    int64_t n = 0, disagree = 0;
    std::optional<stats::Interval> wilson;  // none when n == 0
};
// Items where a protocol ran, and those where its check held (bridge: bit-exact; audit: reproduced).
struct ProtocolCount {
    int64_t n = 0, held = 0;
};
struct TransplantSummary {
    int64_t items = 0, prefillFollowsLive = 0, liveFollowsPrefill = 0;  // each item tries both directions
};
struct LocalizeRow {
    std::string itemId;
    LocalizeResult result;
};
// The batch protocol's cell of one kernel set and batch size, over the items.
struct BatchRow {
    int64_t n = 0, logitsEqual = 0, cacheEqual = 0, suffixSplit = 0;
    Quantiles firstDivergence, marginAtDivergence;
    std::optional<std::pair<std::string, std::string>>
        firstDifferingOp;  // (item, op) of the first item whose logits differ
};
// Each item's own wall time, as the run measured it.
struct TimeSummary {
    int64_t items = 0, tokens = 0, divergentItems = 0;
    double seconds = 0, divergentSeconds = 0;
    Quantiles secondsPerItem;
};
struct StudySummary {
    MatchedSummary matched;
    std::map<std::string, DisagreementRow> fixedPrefix;  // precision name -> its row; bf16 and fp32 by default
    ProtocolCount bridge, audit;
    TransplantSummary transplant;
    std::vector<LocalizeRow> localize;  // the items where it ran, in order
    std::map<std::string, std::map<int64_t, BatchRow>> batch;  // kernels -> batch size -> row
    TimeSummary time;
    // Whether any protocol but batch left a result (a batch-only run has none).
    bool ranStudyProtocols() const;
};
StudySummary summarizeStudy(const std::vector<ItemRecord>& items);
// Precision names as a reader expects them: precisionNames()' order (bf16, fp32, then the remedies),
// then any other.
std::vector<std::string> precisionsInReadingOrder(const std::set<std::string>& names);

// A run's report: which run, what it ran on, and its study.
struct RunReport {
    std::string runId, experiment;
    Kernels kernels = Kernels::Torch;
    int64_t items = 0;
    nlohmann::json environment, mixedEnvironments;  // the manifest's records, null where it has none
    std::optional<std::string> cpuModel;  // the machine that created the run, where recorded
    StudySummary study;
};
RunReport buildReport(const std::vector<ItemRecord>& items, const RunInfo& run);

// Per divergent item: the generated step where live and prefill first differ, and the live side's
// top-1/top-2 margin there.
enum class ItemMeasure { FirstDivergence, MarginAtDivergence };
// The value of `measure` for one item, if it diverged and the value was recorded.
std::optional<double> measureOf(const ItemRecord& item, ItemMeasure measure);

// Equal-width bars covering every divergent item's value: one per step for first divergence (wider
// when steps run past `maxBars`), `maxBars` bars from 0 to the largest margin for margins.
std::vector<HistogramBar> histogramOf(const std::vector<ItemRecord>& items, ItemMeasure measure, int maxBars = 24);

// A duration as H:MM:SS (rounded to the second), as the report and the CLI's progress print it.
std::string clockTime(double seconds);
// A report number with `digits` decimals; "-" where the report holds none (null).
std::string fixedText(const nlohmann::json& x, int digits);

nlohmann::json toJson(const RunReport& report);  // the keys above
std::string reportMarkdown(const RunReport& report);
// Several runs' reports side by side (`kvscope report --compare`), e.g. the study with torch kernels
// next to the same study with invariant kernels: {"runs": [report, ...]} and one table.
nlohmann::json comparisonReport(const std::vector<RunReport>& reports);
std::string comparisonMarkdown(const std::vector<RunReport>& reports);
std::string itemsCsv(const std::vector<ItemRecord>& items);

}  // namespace kvscope::experiments
