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

// First thing in a widget test's main(): runs the model code of the process with quiet threads.
// Each test process builds its fixture ledger in-process. With CTest running processes side by side,
// OpenMP and OpenBLAS threads spinning against each other made that 10x slower (measured 110 s vs
// 8 s); they read these variables when the libraries load, hence a re-exec (once).
void reexecWithQuietThreads(char** argv);

}  // namespace kvscope::widgets
