// SPDX-License-Identifier: MIT
#pragma once
// Tables of the study from a ledger run. The JSON keys below are a contract users' scripts rely on:
//   matched: n, suffix_differ, label_differ, accuracy_live, accuracy_prefill, accuracy_diff,
//            accuracy_diff_ci [lo, hi] (paired bootstrap, 10000 resamples, seed 0),
//            accuracy_diff_newcombe_ci, mcnemar_p, replicas_exact {live, prefill}, no_boundary,
//            margins {at_divergence, non_divergent} (quantiles)
//   fixed_prefix_2x2: {bf16|fp32: n, disagree, wilson_upper}
//   kernels ("torch" | "invariant")
//   bridge {n, exact}   audit {n, reproduced}   transplant {n, follows_donor, ...}
//   localize {n, layers_needed: [[layers of item 1], ...], items: [...]}
// Proportions are fractions, not percent.
#include "experiments/ledger.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvscope::experiments {

nlohmann::json buildReport(const std::vector<ItemRecord>& items, const RunInfo& run);
std::string reportMarkdown(const nlohmann::json& report);
// Several runs' reports side by side (`kvscope report --compare`), e.g. the study with torch kernels
// next to the same study with invariant kernels: {"runs": [report, ...]} and one table.
nlohmann::json comparisonReport(const std::vector<nlohmann::json>& reports);
std::string comparisonMarkdown(const nlohmann::json& comparison);
std::string itemsCsv(const std::vector<ItemRecord>& items);

}  // namespace kvscope::experiments
