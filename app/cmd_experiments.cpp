// SPDX-License-Identifier: MIT
// kvscope run / report / audit / compare / ledger merge: the headless experiment engine.
// Exit codes: 0 success; 1 failure; 2 usage error; 3 audit found mismatches; 130 interrupted
// (Ctrl-C: the item in flight is finished and recorded first; run the same command to resume).
#include "cli_common.h"

#include "core/cache/fingerprint.h"
#include "core/util/atomic_file.h"

#include "experiments/ledger.h"
#include "experiments/protocols.h"
#include "experiments/report.h"
#include "experiments/runner.h"
#include "experiments/trajectories.h"

#include "core/util/error.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

namespace kvscope::cli {
namespace {

using namespace kvscope::experiments;

std::string chooseRun(const Ledger& ledger, const std::string& requested) {
    if (!requested.empty()) return ledger.run(requested).runId;
    const auto runs = ledger.runs();
    if (runs.empty()) throw UsageError(ledger.path() + ": the ledger holds no run");
    return runs.back().runId;  // the newest
}

ItemRecord findItem(const Ledger& ledger, const std::string& runId, const std::string& itemId) {
    for (ItemRecord& item : ledger.items(runId))
        if (item.itemId == itemId) return std::move(item);
    throw UsageError(ledger.path() + ": run " + runId + " has no item '" + itemId + "'");
}

void addRun(CLI::App& app) {
    struct Options {
        std::string experiment, items, shard, timing;
        RunOptions run;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("run", "Run an experiment file into a ledger (resumable)");
    cmd->add_option("experiment", o->experiment, "Experiment file (.toml)")->required()->check(CLI::ExistingFile);
    cmd->add_option("--ledger", o->run.ledgerPath, "SQLite ledger to write (created if needed)")->required();
    cmd->add_flag("--new-run", o->run.newRun, "Start a new run even though the ledger holds one with other inputs");
    cmd->add_option("--limit", o->run.limit, "Run at most N items")->check(kNonNegative);
    cmd->add_option("--items", o->items, "Only these item ids: a,b,c");
    cmd->add_option("--shard", o->shard, "Run shard I of N (items whose index % N == I), e.g. 0/4");
    cmd->add_option("--keep-caches", o->run.keepCachesDir, "Also save each item's live and prefill caches here");
    cmd->add_option("--threads", o->run.threads, "Intra-op threads (default: the experiment's, else all cores)");
    cmd->add_option("--timing", o->timing,
                    "Also write this invocation's time per item and per step as JSON here (for speed figures)");
    cmd->callback([o] {
        const ExperimentConfig config = ExperimentConfig::load(o->experiment);
        if (!config.modelCatalog.empty()) ensureCatalogModel(catalogModel(config.modelCatalog));
        if (!o->items.empty()) {
            std::stringstream ss(o->items);
            for (std::string id; std::getline(ss, id, ',');) o->run.onlyItems.push_back(id);
        }
        if (!o->shard.empty()) std::tie(o->run.shardIndex, o->run.shardCount) = parseShard(o->shard);
        installInterruptHandler();
        const RunSummary s = runExperiment(config, o->run, showRunProgress, stopRequested());
        std::fprintf(stderr, "kvscope run: run %s %s: %lld items run, %lld already done, %lld selected, %.1f s\n",
                     s.runId.c_str(), s.resumed ? "resumed" : "started", static_cast<long long>(s.ran),
                     static_cast<long long>(s.alreadyDone), static_cast<long long>(s.selected), s.seconds);
        showTimeByStep("run", s);
        if (!o->timing.empty())
            writeFileAtomically(o->timing, [&](std::ostream& out) { out << timingJson(s).dump(2) << "\n"; });
        if (s.interrupted) {
            std::fprintf(
                stderr,
                "kvscope run: interrupted; every finished item is recorded. Resume with: kvscope run %s --ledger %s\n",
                o->experiment.c_str(), o->run.ledgerPath.c_str());
            throw ExitStatus(130);
        }
    });
}

void addReport(CLI::App& app) {
    struct Options {
        std::string ledger, run, format = "md", out;
        bool compare = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("report", "Print and write the study's tables for a ledger run");
    cmd->add_option("ledger", o->ledger, "Ledger file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--run", o->run, "Run id (default: the newest)");
    cmd->add_option("--format", o->format, "md, json or csv (per item)")->check(CLI::IsMember({"md", "json", "csv"}));
    cmd->add_option("--out", o->out, "Also write report.md, report.json and items.csv into this folder");
    cmd->add_flag("--compare", o->compare,
                  "Every run in the ledger side by side, oldest first (e.g. torch vs invariant kernels); md or json")
        ->excludes("--run");
    cmd->callback([o] {
        const Ledger ledger(o->ledger, LedgerAccess::ReadOnly);
        if (o->compare) {
            if (o->format == "csv" || !o->out.empty()) throw UsageError("--compare prints md or json only");
            std::vector<RunReport> reports;
            for (const RunInfo& r : ledger.runs())  // the studies (imported trajectories have replays instead)
                if (!isImportedRun(r.manifest)) reports.push_back(buildReport(ledger.items(r.runId), r));
            if (reports.empty()) throw UsageError(o->ledger + " holds no run");
            std::cout << (o->format == "json" ? comparisonReport(reports).dump(2) + "\n" : comparisonMarkdown(reports));
            return;
        }
        const std::string runId = chooseRun(ledger, o->run);
        const auto items = ledger.items(runId);
        const RunInfo run = ledger.run(runId);
        const bool imported = isImportedRun(run.manifest);
        const RunReport study = imported ? RunReport() : buildReport(items, run);
        const nlohmann::json report = imported ? importedRunReport(items, run) : toJson(study);
        const std::string md = imported ? importedRunMarkdown(report) : reportMarkdown(study),
                          csv = imported ? importedRunCsv(report) : itemsCsv(items), json = report.dump(2) + "\n";
        std::cout << (o->format == "json" ? json : o->format == "csv" ? csv : md);
        if (!o->out.empty()) {
            std::filesystem::create_directories(o->out);
            for (const auto& [name, text] : {std::pair{"report.md", md}, {"report.json", json}, {"items.csv", csv}})
                writeTextFileAtomically((std::filesystem::path(o->out) / name).string(), text);
        }
    });
}

void addAudit(CLI::App& app) {
    struct Options {
        std::string ledger, run, model, dataset;
        int64_t limit = -1;
        int threads = 0;
        bool full = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("audit", "Replay a ledger run and check every token id and fingerprint");
    cmd->add_flag("--full", o->full,
                  "Runs made with invariant kernels: replay every protocol token by token, as for torch kernels, "
                  "instead of checking each trajectory by one forward");
    cmd->add_option("ledger", o->ledger, "Ledger file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--run", o->run, "Run id (default: the newest)");
    cmd->add_option("--model", o->model, "Model directory, if it moved since the run");
    cmd->add_option("--dataset", o->dataset, "Dataset file, if it moved since the run");
    cmd->add_option("--limit", o->limit, "Audit at most N items")->check(kNonNegative);
    addThreadsOption(cmd, o->threads);
    cmd->callback([o] {
        applyThreads(o->threads);
        const Ledger ledger(o->ledger, LedgerAccess::ReadOnly);
        AuditOptions options;
        options.modelDir = o->model, options.datasetPath = o->dataset, options.limit = o->limit;
        options.depth = o->full ? AuditDepth::Full : AuditDepth::Auto;
        const auto printMode = [](const AuditSummary& s) {
            std::cout << "audit: "
                      << (s.atPrefillSpeed ? "invariant kernels: each trajectory checked by one forward, boundary "
                                             "caches by one prefill (protocol results not recomputed; --full "
                                             "replays them)"
                                           : "every protocol replayed token by token")
                      << "\naudit: the run ran on " << s.runEnvironment << "\naudit: this replay runs on "
                      << (s.environmentMatches ? "the same"
                                               : s.replayEnvironment +
                                                     " (not the run's: a mismatch may be the environment's, not the "
                                                     "ledger's)")
                      << "\n";
        };
        const auto printMismatches = [](const ItemAudit& item) {
            for (const auto& m : item.mismatches) std::cout << "item " << item.itemId << ": " << m << "\n";
        };
        const AuditSummary s = auditRun(ledger, chooseRun(ledger, o->run), options, printMode, printMismatches);
        std::cout << "audit: " << s.reproduced << "/" << s.checked << " items reproduced\n";
        if (s.reproduced != s.checked) throw ExitStatus(3);
    });
}

// One side of `compare` on the command line: --a CONSTRUCTION [--a-dtype D] [--a-kernels K].
struct SideOptions {
    std::string construction, dtype, kernels;
    SideRecipe recipe() const {
        SideRecipe r;
        r.construction = construction;
        r.dtype = dtype;
        if (!kernels.empty()) r.kernels = parseKernels(kernels);
        return r;
    }
};

void addSideOptions(CLI::App* cmd, const std::string& name, SideOptions& side, const std::string& construction) {
    side.construction = construction;
    cmd->add_option("--" + name, side.construction,
                    "Side " + name + "'s construction: live | prefill | incremental[:K] | chunked:N (default " +
                        construction + ")");
    cmd->add_option("--" + name + "-dtype", side.dtype, "Side " + name + "'s precision (default: the run's)")
        ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
    cmd->add_option("--" + name + "-kernels", side.kernels, "Side " + name + "'s kernels (default: the run's)")
        ->check(CLI::IsMember({"torch", "invariant", "invariant-tiles"}));
}

// The dtype and kernels as the cache records them (compareSides applied the run's defaults).
nlohmann::json sideJson(const ComparedSide& side) {
    return {{"label", side.label},
            {"construction", side.cache.construction()},
            {"dtype", dtypeName(side.cache.dtype())},
            {"kernels", kernelsName(side.cache.kernels())},
            {"fingerprint", fingerprintCache(side.cache).overall},
            {"continuation", side.continuation.ids}};
}

nlohmann::json comparisonJson(const std::string& runId, const std::string& itemId, const BoundaryState& boundary,
                              const SideComparison& c) {
    return {{"run", runId},
            {"item", itemId},
            {"boundary", boundary.boundary},
            {"prefix_length", boundary.prefix.size()},
            {"a", sideJson(c.a)},
            {"b", sideJson(c.b)},
            {"first_divergence", c.firstDivergence < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.firstDivergence)},
            {"diff", c.diff ? cacheDiffJson(*c.diff, false) : nlohmann::json(nullptr)}};
}

void printComparison(const std::string& runId, const std::string& itemId, const BoundaryState& boundary,
                     const SideComparison& c) {
    std::cout << "item " << itemId << " of run " << runId << ", boundary after " << boundary.boundary
              << " generated tokens (prefix of " << boundary.prefix.size() << " tokens)\n"
              << "a: " << c.a.label << ": " << c.a.continuation.ids.size() << " tokens\n"
              << "b: " << c.b.label << ": " << c.b.continuation.ids.size() << " tokens\n";
    if (c.firstDivergence < 0)
        std::cout << "continuations: identical\n";
    else
        std::cout << "continuations: first differ at token " << c.firstDivergence << "\n";
    if (c.diff)
        printCacheDiff(*c.diff);
    else
        std::cout << "caches: different precisions, no element-wise difference\n";
}

// kvscope compare: the GUI's "compare two constructions" on one ledger item, headless.
void addCompare(CLI::App& app) {
    struct Options {
        std::string ledger, run, item, model;
        SideOptions a, b;
        int threads = 0;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "compare", "Rebuild one ledger item's stage boundary two ways and compare the caches and continuations");
    cmd->add_option("ledger", o->ledger, "Ledger file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--item", o->item, "Item id")->required();
    cmd->add_option("--run", o->run, "Run id (default: the newest)");
    cmd->add_option("--model", o->model, "Model directory, if it moved since the run");
    addSideOptions(cmd, "a", o->a, "live");
    addSideOptions(cmd, "b", o->b, "prefill");
    cmd->add_flag("--json", o->json, "Print JSON");
    addThreadsOption(cmd, o->threads);
    cmd->callback([o] {
        applyThreads(o->threads);
        const Ledger ledger(o->ledger, LedgerAccess::ReadOnly);
        const RunInfo run = ledger.run(chooseRun(ledger, o->run));
        const ItemRecord item = findItem(ledger, run.runId, o->item);
        const ExperimentConfig config = configOfRun(run, o->model);
        ModelPool models(config.modelDir, config.device, config.numerics());
        const Tokenizer tokenizer = Tokenizer::fromModelDir(config.modelDir);
        const ItemContext ctx{config, tokenizer, &models, ""};
        const BoundaryState boundary = rebuildStoredBoundary(ctx, item);
        const SideRecipe a = o->a.recipe(), b = o->b.recipe();
        const SideComparison c = compareSides(
            ctx, [&](const std::string& d, Kernels k) -> const Transformer& { return models.get(d, k); }, boundary, a,
            b, [] { return !stopRequested().load(); });
        if (o->json)
            std::cout << comparisonJson(run.runId, item.itemId, boundary, c).dump() << "\n";
        else
            printComparison(run.runId, item.itemId, boundary, c);
    });
}

void addLedgerMerge(CLI::App& app) {
    struct Options {
        std::string out;
        std::vector<std::string> inputs;
        bool allowMixedEnvironments = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* ledger = app.add_subcommand("ledger", "Ledger maintenance");
    ledger->require_subcommand(1);
    CLI::App* merge = ledger->add_subcommand("merge", "Combine shard ledgers of one run into OUT");
    merge->add_option("out", o->out, "Ledger to merge into (created if needed)")->required();
    merge->add_option("inputs", o->inputs, "Shard ledgers")->required()->check(CLI::ExistingFile);
    merge->add_flag("--allow-mixed-environments", o->allowMixedEnvironments,
                    "Merge shards of one experiment run on different libtorch builds, CPUs or thread counts into one "
                    "run (their bits may differ; the run's report says it is mixed)");
    merge->callback([o] {
        const MergeOptions options{o->allowMixedEnvironments};
        for (const auto& r : mergeLedgers(o->out, o->inputs, options))
            std::cout << "run " << r.runId << ": " << r.itemsDone << " items\n";
    });
}

}  // namespace

void addExperimentCommands(CLI::App& app) {
    addRun(app);
    addReport(app);
    addAudit(app);
    addCompare(app);
    addLedgerMerge(app);
}

}  // namespace kvscope::cli
