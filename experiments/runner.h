// SPDX-License-Identifier: MIT
#pragma once
// A whole batch: resolve the manifest, find or create the run in the ledger, then run each item
// not yet finished (respecting --limit, --items and --shard) and record it in one transaction.
// Progress goes to a callback; a stop request is honoured between items.
#include "experiments/experiment_config.h"
#include "experiments/item_result.h"
#include "experiments/ledger.h"
#include "experiments/protocols.h"

#include "core/model/transformer.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvscope::experiments {

struct RunOptions {
    std::string ledgerPath;
    bool newRun = false;                 // allow a new run when the inputs changed
    int64_t limit = -1;                  // at most this many items (of those selected), -1: all
    std::vector<std::string> onlyItems;  // empty: every item
    int shardIndex = 0, shardCount = 1;  // items whose dataset index % count == index
    std::string keepCachesDir;
    int threads = -1;                    // -1: the experiment file's setting
};

struct RunProgress {
    int64_t done = 0, total = 0;         // of the items this invocation will run
    std::string currentItem;
    double tokensPerSecond = 0;
    double etaSeconds = 0;
    std::optional<ItemStatus> lastStatus;  // of the item that just finished; none while one starts
};

// One item of this invocation: its time, by step, for speed figures (`kvscope run --timing`).
struct ItemTiming {
    std::string itemId;
    double seconds = 0;
    int64_t tokens = 0;
    bool divergent = false;  // transplant and localize run only on these
    std::map<std::string, double> secondsBy;
};

struct RunSummary {
    std::string runId;
    bool resumed = false;
    int64_t ran = 0, alreadyDone = 0, selected = 0;
    bool interrupted = false;
    double seconds = 0;
    std::vector<ItemTiming> items;            // the items this invocation ran
    std::string experiment;
    Kernels kernels = Kernels::Torch;
    int threads = 0;                  // intra-op threads the items ran with
    nlohmann::json environment;       // the manifest's (manifest.h's runEnvironment)

    std::map<std::string, double> secondsByStep() const;  // the items' secondsBy, summed: where the time went
};
// The summary as JSON: {run, experiment, kernels, threads, cpu_model, kvscope (version), environment, items_run, seconds,
// seconds_by_step, items: [{id, seconds, tokens, divergent, seconds_by_step}]}.
nlohmann::json timingJson(const RunSummary& summary);

// "I/N" (0 <= I < N <= 1,000,000) -> {I, N}; UsageError naming --shard otherwise.
std::pair<int, int> parseShard(const std::string& text);

RunSummary runExperiment(const ExperimentConfig& config, const RunOptions& options,
                         const std::function<void(const RunProgress&)>& onProgress,
                         const std::atomic<bool>& stopRequested);

struct AuditOptions {
    std::string modelDir, datasetPath;  // where the run's model and dataset are now, if they moved
    int64_t limit = -1;  // at most this many items, -1: all
    AuditDepth depth = AuditDepth::Auto;
};

// One audited item: a line per mismatch with the ledger (empty: reproduced bit for bit).
struct ItemAudit {
    std::string itemId;
    std::vector<std::string> mismatches;
};

struct AuditSummary {
    bool atPrefillSpeed = false;  // see AuditDepth
    int64_t checked = 0, reproduced = 0;
    // Where the run ran and where this replay runs (environmentText); a replay on another
    // environment may legitimately give other bits.
    std::string runEnvironment, replayEnvironment;
    bool environmentMatches = true;
};

// Replays run `runId` of `ledger` item by item (kvscope audit, and the crash-safety test in
// process). Refuses, naming what changed, a run whose experiment file, model or dataset differ from
// what its manifest recorded. `onStart` hears how it will replay, `onItem` each item's verdict.
AuditSummary auditRun(const Ledger& ledger, const std::string& runId, const AuditOptions& options,
                      const std::function<void(const AuditSummary&)>& onStart,
                      const std::function<void(const ItemAudit&)>& onItem);

// A ledger run's experiment as it was run, from the paths its manifest records; a non-empty
// `modelDir` or `datasetPath` says where those inputs are now.
ExperimentConfig configOfRun(const RunInfo& run, const std::string& modelDir = "", const std::string& datasetPath = "");

}  // namespace kvscope::experiments
