// SPDX-License-Identifier: MIT
// A .safetensors file: the 8-byte length, the JSON header, the tensor table it describes and the
// data behind it. Every tensor the header accepts is read back, stored and converted to float.
#include "fuzz_support.h"

#include "core/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("input.safetensors", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const kvscope::SafetensorsFile file(path);
        for (const auto& entry : file.entries()) {
            file.read(entry.name);
            file.read(entry.name, torch::kFloat32);
        }
        file.find("__metadata__");
    });
    return 0;
}
