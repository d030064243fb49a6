// SPDX-License-Identifier: MIT
// libtorch's headers (through runner.h and test_support.h) before the fixture's Qt headers.
#include "experiments/experiment_config.h"
#include "experiments/runner.h"

#include "support/test_support.h"

#include "widgets_fixture.h"

#include <unistd.h>

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

void reexecWithQuietThreads(char** argv) {
    if (std::getenv("OPENBLAS_NUM_THREADS")) return;
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);
}

}  // namespace kvscope::widgets
