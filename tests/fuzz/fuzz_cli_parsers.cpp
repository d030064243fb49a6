// SPDX-License-Identifier: MIT
// The parsers behind command-line values that name ids, layers, positions, K/V and shards. The
// first byte picks the parser, the rest is the text, so one corpus covers them all.
#include "fuzz_support.h"

#include "core/cache/transplant.h"
#include "core/text/tokenizer.h"
#include "core/util/parse.h"
#include "experiments/runner.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        kvscope::TransplantSpec spec;
        switch (data[0] % 6) {
        case 0: kvscope::parseIdList(text, "--ids"); break;
        case 1: kvscope::TransplantSpec::parseLayers(text, 24); break;
        case 2:
            spec.parsePositions(text);
            spec.describe();
            break;
        case 3: kvscope::parseKvParts(text); break;
        case 4: kvscope::experiments::parseShard(text); break;
        default: kvscope::parseNonNegativeInt(text); break;
        }
    });
    return 0;
}
