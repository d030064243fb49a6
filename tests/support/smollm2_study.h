// SPDX-License-Identifier: MIT
#pragma once
// The SmolLM2 study's experiment file (experiments/smollm2.toml) as the tests run it: on tests/data's
// copy of the model, cut down by the test.
#include <string>
#include <utility>
#include <vector>

namespace kvscope::test {

// tests/data's SmolLM2-135M-Instruct GGUF (scripts/fetch-test-data.sh --smollm2 puts it there), or ""
// when it was not fetched.
std::string smollm2Gguf();

// experiments/smollm2.toml (or `experimentFile` beside it: smollm2-invariant.toml) with its dataset
// path made absolute and each (text, replacement) applied, written to `path`. Throws
// std::runtime_error naming a text the file no longer has.
void writeSmolLM2Experiment(const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& replacements,
                            const std::string& experimentFile = "smollm2.toml");

}  // namespace kvscope::test
