// SPDX-License-Identifier: MIT
#pragma once
// An independent, plainly written float64 implementation of the Qwen2 / Llama / Qwen3 forward pass
// (loops over std::vector<double>, no libtorch ops, no cache), read straight from the safetensors
// files. It exists only to check kvscope's Transformer: same inputs, logits within 1e-4 in fp32.
#include <string>
#include <vector>

namespace kvscope::test {

// Logits [S][V] for every position of `ids`, computed in float64 from the checkpoint in `dir`.
std::vector<std::vector<double>> referenceLogits(const std::string& dir, const std::vector<int64_t>& ids);

}  // namespace kvscope::test
