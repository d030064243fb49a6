// SPDX-License-Identifier: MIT
// kvscope train-demo-model: trains the embedded demo model (core/train).
// kvscope demo [--model smollm2]: runs experiments/demo.toml on the shipped model (or a catalog
// model's study, fetching the model first) into a fresh ledger and reports.
#include "cli_common.h"

#include "experiments/ledger.h"
#include "experiments/report.h"
#include "experiments/runner.h"

#include "core/train/demo_trainer.h"
#include "core/util/error.h"
#include "core/util/resources.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

namespace kvscope::cli {
namespace {

void showTrainingProgress(const train::TrainingProgress& p) {
    if (p.phase == "train")
        std::fprintf(stderr, "kvscope train-demo-model: step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s\n",
                     static_cast<long long>(p.step), static_cast<long long>(p.steps), p.loss, p.tokensPerSecond,
                     experiments::clockTime(p.etaSeconds).c_str());
    else
        std::fprintf(stderr, "kvscope train-demo-model: %s %lld/%lld\n", p.phase.c_str(),
                     static_cast<long long>(p.step), static_cast<long long>(p.steps));
    std::fflush(stderr);
}

void addTrainDemoModel(CLI::App& app) {
    struct Options {
        std::string out;
        train::DemoRecipe recipe;
        std::string taskFormat = train::formatName(train::DemoRecipe{}.task.format);
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd =
        app.add_subcommand("train-demo-model", "Train the small staged-arithmetic demo model (Qwen2 architecture)");
    cmd->add_option("--out", o->out, "Output folder (replaced when training finishes)")->required();
    cmd->add_option("--seed", o->recipe.seed, "Seed for data, initial weights and order")->capture_default_str();
    cmd->add_option("--steps", o->recipe.steps, "Optimiser steps")->capture_default_str()->check(kPositive);
    cmd->add_option("--tokens-per-step", o->recipe.tokensPerStep, "Tokens packed into each step")
        ->capture_default_str()
        ->check(CLI::Range(64, 65536));
    cmd->add_option("--hidden-size", o->recipe.hiddenSize, "Hidden size")->capture_default_str()->check(kPositive);
    cmd->add_option("--layers", o->recipe.numLayers, "Layers")->capture_default_str()->check(kPositive);
    cmd->add_option("--intermediate-size", o->recipe.intermediateSize, "MLP size")
        ->capture_default_str()
        ->check(kPositive);
    cmd->add_option("--lr", o->recipe.learningRate, "Peak learning rate")->capture_default_str()->check(kPositive);
    cmd->add_option("--task-format", o->taskFormat,
                    "plain (one way to write each step) or varied (equivalent ways drawn 50/50)")
        ->capture_default_str()
        ->check(CLI::IsMember({"plain", "varied"}));
    cmd->add_option("--min-operations", o->recipe.task.minOperations, "Fewest stages per problem")
        ->capture_default_str()
        ->check(CLI::Range(1, 8));
    cmd->add_option("--max-operations", o->recipe.task.maxOperations, "Most stages per problem")
        ->capture_default_str()
        ->check(CLI::Range(1, 8));
    cmd->add_option("--test-items", o->recipe.testItems, "Test set size")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--validation-items", o->recipe.validationItems, "Validation set size")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--max-operand", o->recipe.task.maxOperand, "Largest + / - operand")
        ->capture_default_str()
        ->check(CLI::Range(2, 100000));
    cmd->add_option("--max-value", o->recipe.task.maxValue, "Largest intermediate result")
        ->capture_default_str()
        ->check(CLI::Range(20, 1000000));
    cmd->add_option("--threads", o->recipe.threads, "Intra-op threads (a fixed count keeps the weights reproducible)")
        ->capture_default_str()
        ->check(kNonNegative);
    cmd->callback([o] {
        o->recipe.task.format = train::parseArithFormat(o->taskFormat);
        if (o->recipe.task.maxOperations < o->recipe.task.minOperations)
            o->recipe.task.minOperations = o->recipe.task.maxOperations;
        installInterruptHandler();
        const auto r = train::trainDemoModel(o->recipe, o->out, showTrainingProgress, stopRequested());
        std::printf("wrote %s in %.1f s: final training loss %.4f, validation loss %.4f\n", o->out.c_str(), r.seconds,
                    r.finalTrainLoss, r.validationLoss);
        for (const auto& a : r.test)
            std::printf("test accuracy %s: %lld/%lld (%.1f%%)\n", a.dtype.c_str(), static_cast<long long>(a.correct),
                        static_cast<long long>(a.total), 100.0 * a.fraction());
        std::printf("weights fingerprint (bf16): %s\n", r.fingerprint.c_str());
    });
}

// A new file name in the user's data folder, so every demo writes a fresh ledger.
std::string freshDemoLedgerPath(const std::string& model) {
    const std::filesystem::path dir = userDataDir();
    std::filesystem::create_directories(dir);
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
    const std::string stem = (model == "demo" ? "demo-" : "demo-" + model + "-") + stamp;
    std::filesystem::path path = dir / (stem + ".db");
    for (int n = 2; std::filesystem::exists(path); ++n) path = dir / (stem + "-" + std::to_string(n) + ".db");
    return path.string();
}

void addDemo(CLI::App& app) {
    struct Options {
        std::string experiment, model = "demo";
        experiments::RunOptions run;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "demo", "Run the whole study (every protocol) on the shipped demo model or a real one, then print the report");
    std::vector<std::string> models{"demo"};
    std::string described = "demo (the shipped model, experiments/demo.toml)";
    for (const CatalogModel& m : catalogModels()) {
        models.push_back(m.name);
        described += ", " + m.name + " (" + m.experiment + "; fetched into the user's cache on first use)";
    }
    cmd->add_option("--model", o->model, "Which study: " + described)
        ->capture_default_str()
        ->check(CLI::IsMember(models));
    cmd->add_option("--ledger", o->run.ledgerPath,
                    "Ledger to write (default: a new file in the user's data folder; an existing one is resumed)");
    cmd->add_option("--limit", o->run.limit, "Run at most N items")->check(kNonNegative);
    cmd->add_option("--experiment", o->experiment, "Experiment file (default: the shipped experiments/demo.toml)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--threads", o->run.threads, "Intra-op threads (default: all cores)")->check(kNonNegative);
    cmd->callback([o] {
        const bool shipped = o->model == "demo";
        const std::string experimentPath =
            !o->experiment.empty()
                ? o->experiment
                : findDataFile(shipped ? "experiments/demo.toml" : catalogModel(o->model).experiment);
        const experiments::ExperimentConfig config = experiments::ExperimentConfig::load(experimentPath);
        if (!config.modelCatalog.empty()) ensureCatalogModel(catalogModel(config.modelCatalog));
        if (o->run.ledgerPath.empty()) o->run.ledgerPath = freshDemoLedgerPath(o->model);
        std::fprintf(stderr, "kvscope demo: experiment %s\nkvscope demo: model %s\nkvscope demo: ledger %s\n",
                     experimentPath.c_str(), config.modelDir.c_str(), o->run.ledgerPath.c_str());
        installInterruptHandler();
        const auto s = experiments::runExperiment(config, o->run, showRunProgress, stopRequested());
        std::fprintf(stderr, "kvscope demo: %lld items run in %.1f s\n", static_cast<long long>(s.ran), s.seconds);
        showTimeByStep("demo", s);
        if (s.interrupted) {
            std::fprintf(stderr,
                         "kvscope demo: interrupted; finished items are recorded. Resume with: kvscope demo --model %s "
                         "--ledger %s\n",
                         o->model.c_str(), o->run.ledgerPath.c_str());
            throw ExitStatus(130);
        }
        const experiments::Ledger ledger(o->run.ledgerPath, experiments::LedgerAccess::ReadOnly);
        std::cout << experiments::reportMarkdown(experiments::buildReport(ledger.items(s.runId), ledger.run(s.runId)));
        std::cout << "\nLedger: " << o->run.ledgerPath << "\nOpen it in the desktop application:  kvscope-gui "
                  << o->run.ledgerPath << "\nMachine-readable report:             kvscope report " << o->run.ledgerPath
                  << " --format json\n";
    });
}

}  // namespace

void addDemoCommands(CLI::App& app) {
    addTrainDemoModel(app);
    addDemo(app);
}

}  // namespace kvscope::cli
