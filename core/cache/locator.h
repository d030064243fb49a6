// SPDX-License-Identifier: MIT
#pragma once
// The op-level divergence locator: where does the difference between two constructions of the same
// prefix enter? Both constructions are rebuilt; during the forward that computes the final position
// every op's output *at that position* is captured (embedding, norms, q/k/v projections, q/k norms,
// RoPE, attention scores, softmax, attention output, o_proj, MLP gate/up/down, residuals, final norm,
// logits), and the two runs are compared op by op in execution order.
#include "core/cache/constructions.h"

#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct OpComparison {
    int64_t layer = -1;   // -1 outside the blocks
    std::string op;
    bool bitExact = true;
    double maxAbs = 0;    // max |a-b| in fp32
    int64_t differing = 0, elements = 0;
};

struct LocatorReport {
    std::string constructionA, constructionB;
    int64_t position = 0;                    // the final position, where ops are compared
    std::vector<OpComparison> ops;           // execution order
    std::optional<std::size_t> firstDifference;  // index into ops
    std::string cacheFingerprintA, cacheFingerprintB;  // of the rebuilt caches
};

LocatorReport locateDivergence(const Transformer& model, const std::vector<int64_t>& ids, int64_t promptLength,
                               const Construction& a, const Construction& b);

}  // namespace kvscope
