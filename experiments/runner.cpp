// SPDX-License-Identifier: MIT
#include "experiments/runner.h"

#include "experiments/dataset.h"
#include "experiments/ledger.h"
#include "experiments/manifest.h"
#include "experiments/protocols.h"

#include "core/cache/transplant.h"
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/parse.h"
#include "core/util/threads.h"
#include "core/util/version.h"

#include <chrono>
#include <set>

namespace kvscope::experiments {

const Transformer& ModelPool::get(const std::string& precision) { return get(precision, numerics_.kernels); }

const Transformer& ModelPool::get(const std::string& precision, Kernels kernels) {
    const std::string key = precision + "/" + kernelsName(kernels);
    for (const auto& [name, model] : loaded_)
        if (name == key) return *model;
    const Precision p = parsePrecision(precision);
    Numerics numerics = numerics_;
    numerics.kernels = kernels;
    numerics.mixed = p.mixed;
    loaded_.emplace_back(key, std::make_shared<Transformer>(Transformer::load(
                                  dir_, parseDtype(p.dtype), parseDevice(device_), nullptr, numerics)));
    return *loaded_.back().second;
}

namespace {

// The run this invocation continues or starts; refuses changed inputs unless a new run is asked for.
std::string openRun(Ledger& ledger, const nlohmann::json& manifest, bool newRun, bool& resumed) {
    const std::string runId = runIdOf(manifest);
    if (ledger.hasRun(runId)) {
        resumed = true;
        return runId;
    }
    const auto& name = manifest["identity"]["config"]["name"];
    for (const RunInfo& r : ledger.runs())
        if (r.manifest["identity"]["config"]["name"] == name && !newRun)
            throw UsageError(ledger.path() + " holds run " + r.runId + " of experiment '" + name.get<std::string>() +
                             "' whose inputs differ (" + describeManifestChange(r.manifest, manifest) +
                             "); pass --new-run to start a new run");
    ledger.createRun(runId, manifest);
    resumed = false;
    return runId;
}

std::vector<std::size_t> selectItems(const std::vector<DatasetItem>& items, const RunOptions& o,
                                     const std::set<std::string>& done, int64_t& alreadyDone) {
    std::set<std::string> wanted(o.onlyItems.begin(), o.onlyItems.end());
    for (const auto& id : wanted) {
        bool found = false;
        for (const auto& item : items) found = found || item.id == id;
        if (!found) throw UsageError("--items: no item '" + id + "' in the dataset");
    }
    std::vector<std::size_t> out;
    alreadyDone = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (static_cast<int>(i % static_cast<std::size_t>(o.shardCount)) != o.shardIndex) continue;
        if (!wanted.empty() && !wanted.count(items[i].id)) continue;
        if (o.limit >= 0 && static_cast<int64_t>(out.size()) + alreadyDone >= o.limit) break;
        if (done.count(items[i].id))
            ++alreadyDone;
        else
            out.push_back(i);
    }
    return out;
}

}  // namespace

std::map<std::string, double> RunSummary::secondsByStep() const {
    std::map<std::string, double> sum;
    for (const ItemTiming& item : items)
        for (const auto& [step, seconds] : item.secondsBy) sum[step] += seconds;
    return sum;
}

nlohmann::json timingJson(const RunSummary& s) {
    nlohmann::json items = nlohmann::json::array();
    for (const ItemTiming& t : s.items)
        items.push_back({{"id", t.itemId},
                         {"seconds", t.seconds},
                         {"tokens", t.tokens},
                         {"divergent", t.divergent},
                         {"seconds_by_step", t.secondsBy}});
    return {{"run", s.runId},
            {"experiment", s.experiment},
            {"kernels", kernelsName(s.kernels)},
            {"threads", s.threads},
            {"cpu_model", cpuModelName()},
            {"kvscope", kvscopeVersion()},
            {"environment", s.environment},
            {"items_run", s.ran},
            {"seconds", s.seconds},
            {"seconds_by_step", s.secondsByStep()},
            {"items", items}};
}

namespace {

// What the experiment asks of its model, checked against the model's config before anything is
// hashed, computed or written: transplant layers it has, prompt ids inside its vocabulary.
void checkAgainstModel(const ExperimentConfig& config, const std::vector<DatasetItem>& items) {
    const ModelConfig model = Checkpoint::open(config.modelDir).config();
    if (config.runs(Protocol::Transplant)) {
        try {
            TransplantSpec::parseLayers(config.transplantLayers, model.numLayers, "key 'transplant.layers'");
        } catch (const UsageError& e) {
            throw ConfigError(config.sourcePath + ": " + e.what());
        }
    }
    for (const DatasetItem& item : items)
        for (std::size_t k = 0; k < item.prefixIds.size(); ++k)
            if (item.prefixIds[k] < 0 || item.prefixIds[k] >= model.vocabSize)
                throw FormatError(config.datasetPath + ":" + std::to_string(item.line) + ": field 'prefix_ids' entry " +
                                  std::to_string(k) + " is " + std::to_string(item.prefixIds[k]) + ", outside the " +
                                  std::to_string(model.vocabSize) + "-token vocabulary of " + config.modelDir);
}

}  // namespace

std::pair<int, int> parseShard(const std::string& text) {
    const auto slash = text.find('/');
    if (slash != std::string::npos) {
        const auto index = parseNonNegativeInt(text.substr(0, slash)),
                   count = parseNonNegativeInt(text.substr(slash + 1));
        if (index && count && *index < *count && *count <= 1'000'000)
            return {static_cast<int>(*index), static_cast<int>(*count)};
    }
    throw UsageError("--shard must be I/N, e.g. 0/4 (got '" + text + "')");
}

RunSummary runExperiment(const ExperimentConfig& config, const RunOptions& o,
                         const std::function<void(const RunProgress&)>& onProgress,
                         const std::atomic<bool>& stopRequested) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    if (o.shardCount < 1 || o.shardIndex < 0 || o.shardIndex >= o.shardCount)
        throw UsageError("--shard must be I/N with 0 <= I < N");
    configureThreads(o.threads >= 0 ? o.threads : config.threads);
    config.generateModelIfMissing();
    const auto items = loadDataset(config.datasetPath);
    checkAgainstModel(config, items);
    const nlohmann::json manifest = buildManifest(config);  // hashes every input before anything runs
    const LedgerWriteLock lock(o.ledgerPath);  // before anything is read, so no item is computed twice
    if (!o.keepCachesDir.empty()) removePartialFiles(o.keepCachesDir);  // strays of an interrupted run
    Ledger ledger(o.ledgerPath);
    RunSummary summary;
    summary.runId = openRun(ledger, manifest, o.newRun, summary.resumed);
    summary.experiment = config.name;
    summary.kernels = config.kernels;
    summary.threads = at::get_num_threads();
    summary.environment = environmentOf(manifest);
    const auto todo = selectItems(items, o, ledger.finishedItems(summary.runId), summary.alreadyDone);
    summary.selected = static_cast<int64_t>(todo.size()) + summary.alreadyDone;

    ModelPool models(config.modelDir, config.device, config.numerics());
    const Tokenizer tokenizer = Tokenizer::fromModelDir(config.modelDir);
    ItemContext ctx{config, tokenizer, &models, o.keepCachesDir};
    ctx.dataset = &items;

    RunProgress progress;
    progress.total = static_cast<int64_t>(todo.size());
    int64_t tokens = 0;
    for (std::size_t k = 0; k < todo.size(); ++k) {
        if (stopRequested.load()) {
            summary.interrupted = true;
            break;
        }
        const DatasetItem& item = items[todo[k]];
        progress.currentItem = item.id;
        progress.lastStatus.reset();  // "starting": a terminal shows it, a log waits for the result
        onProgress(progress);
        const ItemRecord rec = runItem(ctx, item, static_cast<int64_t>(todo[k]));
        ledger.recordItem(summary.runId, rec);
        summary.items.push_back({rec.itemId, rec.seconds, rec.tokens, rec.results.divergent(), rec.secondsBy});
        tokens += rec.tokens;
        ++summary.ran;
        const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        progress.done = summary.ran;
        progress.tokensPerSecond = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0;
        progress.etaSeconds =
            elapsed / static_cast<double>(summary.ran) * static_cast<double>(progress.total - summary.ran);
        progress.lastStatus = rec.status;
        onProgress(progress);
    }
    summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return summary;
}

ExperimentConfig configOfRun(const RunInfo& run, const std::string& modelDir, const std::string& datasetPath) {
    const RunDescription d = describeRun(run.manifest);
    if (d.experimentPath.empty()) throw UsageError("run " + run.runId + ": its manifest names no experiment file");
    ExperimentConfig config = ExperimentConfig::load(d.experimentPath);
    // Where the run found them; a manifest from before paths were recorded leaves the file's own.
    if (!d.modelPath.empty()) config.modelDir = d.modelPath;
    if (!d.datasetPath.empty()) config.datasetPath = d.datasetPath;
    if (!modelDir.empty()) config.modelDir = modelDir;
    if (!datasetPath.empty()) config.datasetPath = datasetPath;
    return config;
}

AuditSummary auditRun(const Ledger& ledger, const std::string& runId, const AuditOptions& options,
                      const std::function<void(const AuditSummary&)>& onStart,
                      const std::function<void(const ItemAudit&)>& onItem) {
    const RunInfo run = ledger.run(runId);
    ExperimentConfig config = configOfRun(run, options.modelDir, options.datasetPath);
    // An audit replays on whatever environment it finds and says whether that is the run's; only
    // the inputs must be the run's.
    nlohmann::json here = buildManifest(config);
    const nlohmann::json hereEnvironment = environmentOf(here);
    here["identity"]["environment"] = environmentOf(run.manifest);
    const std::string change = describeManifestChange(run.manifest, here);
    if (!change.empty()) throw UsageError("cannot audit run " + run.runId + ": " + change + " since the run");
    config.protocols.erase(Protocol::Audit);
    ModelPool models(config.modelDir, config.device, config.numerics());
    const Tokenizer tokenizer = Tokenizer::fromModelDir(config.modelDir);
    const auto dataset = loadDataset(config.datasetPath);
    ItemContext ctx{config, tokenizer, &models, ""};
    ctx.dataset = &dataset;
    AuditSummary summary;
    summary.atPrefillSpeed = auditsAtPrefillSpeed(config, options.depth);
    summary.runEnvironment = environmentText(environmentOf(run.manifest));
    summary.replayEnvironment = environmentText(hereEnvironment);
    summary.environmentMatches = environmentOf(run.manifest) == hereEnvironment;
    onStart(summary);
    for (const ItemRecord& stored : ledger.items(run.runId)) {
        if (options.limit >= 0 && summary.checked >= options.limit) break;
        if (stored.index < 0 || static_cast<std::size_t>(stored.index) >= dataset.size())
            throw Error(ledger.path() + ": run " + run.runId + ", item '" + stored.itemId + "': dataset index " +
                        std::to_string(stored.index) + " is not in " + config.datasetPath + " (" +
                        std::to_string(dataset.size()) + " items)");
        ItemAudit verdict{stored.itemId,
                          auditItem(ctx, dataset[static_cast<std::size_t>(stored.index)], stored, options.depth)};
        ++summary.checked;
        if (verdict.mismatches.empty()) ++summary.reproduced;
        onItem(verdict);
    }
    return summary;
}

}  // namespace kvscope::experiments
