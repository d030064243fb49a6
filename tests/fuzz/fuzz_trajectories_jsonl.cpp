// SPDX-License-Identifier: MIT
// Another engine's trajectories file (kvscope import's JSONL) through readTrajectories, then each
// accepted line's engine record through the ledger's JSON form and back: what is accepted must store
// and read back as the same values.
#include "fuzz_support.h"

#include "experiments/trajectories.h"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("trajectories.jsonl", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        for (const auto& t : kvscope::experiments::readTrajectories(path, 1000)) {
            kvscope::experiments::ItemResults results;
            results.engine = t.engine;
            const auto back = kvscope::experiments::itemResultsFromJson(kvscope::experiments::toJson(results), path);
            if (!kvscope::experiments::sameResults(back, results)) std::abort();
        }
    });
    return 0;
}
