// SPDX-License-Identifier: MIT
#include "core/text/bpe_trainer.h"

#include "core/text/byte_level.h"
#include "core/text/regex.h"

#include <map>

namespace kvscope {

const char* const kQwenSplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

TrainedBpe trainByteLevelBpe(const std::vector<std::string>& texts, int numMerges) {
    TrainedBpe out;
    for (const auto& s : byteLevelAlphabet()) out.vocab.push_back(s);

    // Word -> count, each word as a list of symbol ids.
    Regex split(kQwenSplitPattern, false);
    std::map<std::string, int64_t> wordCounts;
    for (const auto& text : texts)
        for (const auto& piece : split.split(text, false)) ++wordCounts[piece];
    std::vector<std::pair<std::vector<int>, int64_t>> words;
    for (const auto& [word, count] : wordCounts) {
        std::vector<int> symbols;
        for (unsigned char b : word) symbols.push_back(b);
        words.emplace_back(std::move(symbols), count);
    }

    for (int m = 0; m < numMerges; ++m) {
        std::map<std::pair<int, int>, int64_t> pairCounts;  // ordered: ties resolve to the smallest pair
        for (const auto& [symbols, count] : words)
            for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pairCounts[{symbols[i], symbols[i + 1]}] += count;
        std::pair<int, int> best{-1, -1};
        int64_t bestCount = 1;  // a pair must occur at least twice to be worth a token
        for (const auto& [pair, count] : pairCounts)
            if (count > bestCount) {
                best = pair;
                bestCount = count;
            }
        if (best.first < 0) break;
        const int newId = static_cast<int>(out.vocab.size());
        out.vocab.push_back(out.vocab[best.first] + out.vocab[best.second]);
        out.merges.emplace_back(out.vocab[best.first], out.vocab[best.second]);
        for (auto& [symbols, count] : words) {
            std::vector<int> merged;
            for (std::size_t i = 0; i < symbols.size(); ++i) {
                if (i + 1 < symbols.size() && symbols[i] == best.first && symbols[i + 1] == best.second) {
                    merged.push_back(newId);
                    ++i;
                } else {
                    merged.push_back(symbols[i]);
                }
            }
            symbols = std::move(merged);
        }
    }
    return out;
}

nlohmann::json makeTokenizerJson(const TrainedBpe& bpe, const std::vector<std::string>& specialTokens) {
    using nlohmann::json;
    json vocab = json::object();
    for (std::size_t id = 0; id < bpe.vocab.size(); ++id) vocab[bpe.vocab[id]] = id;
    json merges = json::array();
    for (const auto& [a, b] : bpe.merges) merges.push_back({a, b});
    json added = json::array();
    for (std::size_t i = 0; i < specialTokens.size(); ++i)
        added.push_back({{"id", bpe.vocab.size() + i},
                         {"content", specialTokens[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", true}});
    const json byteLevel = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    return {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens", added},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", kQwenSplitPattern}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            byteLevel}}}},
        {"post_processor", byteLevel},
        {"decoder", byteLevel},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", ""},
          {"end_of_word_suffix", ""},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", false},
          {"vocab", vocab},
          {"merges", merges}}},
    };
}

}  // namespace kvscope
