// SPDX-License-Identifier: MIT
#pragma once
// Ceilings on sizes read from files, checked before anything is allocated from them. Far above any
// open model (Llama 3.1 405B: hidden 16384, 126 layers, 128 heads, vocabulary 128256, 131072
// positions) and far below what would exhaust memory or hang while building tables.
#include <cstdint>

namespace kvscope::limits {

constexpr int64_t kMaxWidth = int64_t{1} << 17;       // hidden size; intermediate size up to 8x this
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxVocabulary = int64_t{1} << 23;  // token ids are below this
constexpr int64_t kMaxPositions = int64_t{1} << 24;

}  // namespace kvscope::limits
