// SPDX-License-Identifier: MIT
// libtorch's headers (through runner.h and test_support.h) before the fixture's Qt headers.
#include "experiments/experiment_config.h"
#include "experiments/runner.h"
#include "experiments/trajectories.h"

#include "support/test_support.h"

#include "widgets_fixture.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>

namespace kvscope::widgets {

const LedgerFixture& ledgerFixture() {
    static LedgerFixture f = [] {
        static test::TempDir tmp;
        LedgerFixture x;
        x.dir = tmp.path();
        x.ledger = tmp.file("tiny.db");
        x.experiment = tmp.file("tiny.toml");
        test::writeTextFile(
            x.experiment,
            "name = \"tiny\"\n[model]\ndir = \"model\"\n"
            "[model.generate]\narch = \"qwen2\"\nseed = 3\nhidden_size = 128\nlayers = 4\nheads = 4\n"
            "kv_heads = 2\nintermediate_size = 256\n[dataset]\npath = \"" +
                test::testDataDir() +
                "/../../experiments/data/arith12.jsonl\"\n"
                "[generation]\nmax_new_tokens = 64\nignore_eos = true\n[boundary]\nrule = \"fraction\"\n"
                "fraction = 0.5\n[protocols]\nrun = [\"matched\", \"bridge\", \"transplant\", \"localize\"]\n");
        const auto config = experiments::ExperimentConfig::load(x.experiment);
        config.generateModelIfMissing();
        x.model = config.modelDir;
        experiments::RunOptions options;
        options.ledgerPath = x.ledger;
        options.threads = 1;
        std::atomic<bool> stop{false};
        experiments::runExperiment(config, options, [](const experiments::RunProgress&) {}, stop);
        const experiments::Ledger ledger(x.ledger);
        x.items = ledger.items(ledger.runs().front().runId);
        return x;
    }();
    return f;
}

std::string importedLedger(const std::string& path, int count, const std::string& model) {
    const LedgerFixture& f = ledgerFixture();
    std::string lines;
    for (int k = 0; k < count; ++k) {
        const experiments::ItemRecord& item = f.items.at(static_cast<std::size_t>(k));
        const std::vector<int64_t>& trace = item.trajectories.trace.value();
        const std::vector<int64_t> output(trace.begin(), trace.begin() + 12);
        lines += nlohmann::json{{"id", item.itemId},       {"prompt_ids", item.trajectories.prompt.value()},
                                {"output_ids", output},    {"logprobs", std::vector<double>(output.size(), -0.25)},
                                {"top_logprobs", nullptr}, {"engine", "test-engine"},
                                {"dtype", "bf16"},         {"batch_size", k % 2 ? 8 : 1},
                                {"temperature", 0.0},      {"answer", nullptr}}
                     .dump() +
                 "\n";
    }
    const std::string file = path + ".jsonl";
    test::writeTextFile(file, lines);
    const experiments::ImportSummary imported =
        experiments::importTrajectories({file, path, model.empty() ? f.model : model, "imported"});
    for (const auto& [reference, kernels] : {std::pair{"prefill", Kernels::Torch}, {"live", Kernels::Invariant}}) {
        experiments::ReplayRequest r;
        r.ledgerPath = path;
        r.runId = imported.runId;
        r.reference = ForcedReference::parse(reference);
        r.kernels = kernels;
        experiments::replayRun(r);
    }
    return imported.runId;
}

void batchLedger(const std::string& dir, const std::string& path) {
    const std::string experiment = dir + "/batch.toml";
    test::writeTextFile(experiment, "name = \"batch\"\n[model]\ndir = \"" + ledgerFixture().model +
                                        "\"\n[dataset]\npath = \"" + test::testDataDir() +
                                        "/../../experiments/data/arith12.jsonl\"\n"
                                        "[generation]\nmax_new_tokens = 16\nignore_eos = true\n[boundary]\n"
                                        "rule = \"fraction\"\nfraction = 0.5\n[protocols]\nrun = [\"matched\", "
                                        "\"batch\"]\n[batch]\nsizes = [2]\n");
    experiments::RunOptions options;
    options.ledgerPath = path;
    options.threads = 1;
    options.limit = 2;
    std::atomic<bool> stop{false};
    experiments::runExperiment(
        experiments::ExperimentConfig::load(experiment), options, [](const experiments::RunProgress&) {}, stop);
}

void reexecWithQuietThreads(char** argv) {
    if (std::getenv("OPENBLAS_NUM_THREADS")) return;
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);
}

}  // namespace kvscope::widgets
