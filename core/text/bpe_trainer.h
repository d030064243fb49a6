// SPDX-License-Identifier: MIT
#pragma once
// A small byte-level BPE trainer, enough to give generated and trained models a real tokenizer.json
// that the ordinary loader reads. Deterministic: ties between equally frequent pairs go to the pair
// whose ids are smallest.
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kvscope {

// The Qwen2 pre-tokenizer pattern (digits split one by one, words with one leading non-letter).
extern const char* const kQwenSplitPattern;

struct TrainedBpe {
    std::vector<std::string> vocab;                            // id -> byte-level token string
    std::vector<std::pair<std::string, std::string>> merges;   // in rank order
};

// 256 byte tokens (ids 0..255 in byte order), then up to `numMerges` merged tokens.
TrainedBpe trainByteLevelBpe(const std::vector<std::string>& texts, int numMerges);

// A complete tokenizer.json (NFC, Qwen split + ByteLevel, BPE, ByteLevel decoder) whose added
// special tokens get ids right after the BPE vocabulary, in the order given.
nlohmann::json makeTokenizerJson(const TrainedBpe& bpe, const std::vector<std::string>& specialTokens);

}  // namespace kvscope
