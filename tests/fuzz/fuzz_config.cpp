// SPDX-License-Identifier: MIT
// config.json as a checkpoint folder holds it, read by the loader's own entry point, then the
// tensor list the model would expect from it (which multiplies the sizes it read).
#include "fuzz_support.h"

#include "core/model/checkpoint.h"
#include "core/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    kvscope::fuzz::writeScratchFile("config.json", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const auto config = kvscope::ModelConfig::load(kvscope::fuzz::scratchDir());
        kvscope::expectedTensors(config);
        config.toJson().dump();
    });
    return 0;
}
