// SPDX-License-Identifier: MIT
// A saved KV cache (.safetensors with kvscope's sealed metadata): format, version, seal, shapes and
// fingerprints are checked on load; the header-only dtype probe is fuzzed on the same bytes.
#include "fuzz_support.h"

#include "core/cache/cache_io.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("input.kvcache.safetensors", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] { kvscope::savedCacheBuild(path); });
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const auto cache = kvscope::loadCache(path);
        cache.ids();
    });
    return 0;
}
