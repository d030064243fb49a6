// SPDX-License-Identifier: MIT
#pragma once
// Shared by the widget test files: an event-loop wait and a ledger made by the real experiment engine.
// libtorch's headers come before any Qt header (Qt's `slots` macro would rewrite identifiers in them).
#include "experiments/ledger.h"

#include <QTest>

#include <string>
#include <vector>

namespace kvscope::widgets {

// QTest::qWaitFor with a model-sized default: a worker's job on a real model (or under a sanitizer)
// takes minutes, not QTest's 5 seconds.
template <typename F>
bool waitFor(F done, int timeoutMs = 120000) {
    return QTest::qWaitFor(done, timeoutMs);
}

// A ledger made by the real experiment engine: the 12 arithmetic items on the smoke test's generated
// 4-layer model in bf16, cut halfway through 64-token traces. Some items must diverge for the views
// to have something to show; the fixture test says so if none does.
struct LedgerFixture {
    std::string dir, ledger, experiment, model;
    std::vector<experiments::ItemRecord> items;
};

const LedgerFixture& ledgerFixture();  // made once per process

// The fixture's first `count` items as another engine's trajectories (prompt, the first 12 trace
// tokens, a made-up engine logprob of -0.25 each, batch sizes 1 and 8 in turn) imported into a new
// ledger at `path` and replayed as prefill/torch/bf16 and live/invariant/bf16, on `model` (empty:
// the fixture's). Returns the run id.
std::string importedLedger(const std::string& path, int count = 4, const std::string& model = {});
// A run of the batch protocol (sizes 1 and 2) and matched over the fixture model's first 2 items,
// 16 new tokens, in a new ledger at `path`.
void batchLedger(const std::string& dir, const std::string& path);

// First thing in a widget test's main(): runs the model code of the process with quiet threads.
// Each test process builds its fixture ledger in-process. With CTest running processes side by side,
// OpenMP and OpenBLAS threads spinning against each other made that 10x slower (measured 110 s vs
// 8 s); they read these variables when the libraries load, hence a re-exec (once).
void reexecWithQuietThreads(char** argv);

}  // namespace kvscope::widgets
