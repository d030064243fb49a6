// SPDX-License-Identifier: MIT
// An experiment file (TOML) through ExperimentConfig::load, which validates every key and bound.
#include "fuzz_support.h"

#include "experiments/experiment_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("experiment.toml", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] { kvscope::experiments::ExperimentConfig::load(path); });
    return 0;
}
