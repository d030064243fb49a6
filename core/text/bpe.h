// SPDX-License-Identifier: MIT
#pragma once
// The BPE model of a tokenizer.json: a vocabulary (string -> id) and ranked merges, applied as
// `tokenizers` applies them (models/bpe: merge_word, Word::merge_all). A word's characters are its
// first symbols, each looked up in the vocabulary; a character that is not there becomes the
// <0xNN> tokens of its UTF-8 bytes (byte_fallback), else the unknown token (consecutive ones fused
// with fuse_unk), else nothing at all: `tokenizers` drops it, and so does kvscope (SmolLM2's
// byte-level vocabulary, for one, lacks 21 of the 256 byte characters). Then adjacent symbols are
// merged, lowest rank first and leftmost among equals, until no listed merge applies.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvscope {

struct BpeOptions {
    bool ignoreMerges = false;           // Llama 3: a word that is itself a token is not split
    bool byteFallback = false;           // SentencePiece BPE: unknown characters as <0xNN> tokens
    std::optional<std::string> unkToken;  // the unknown token, when the model declares one
    bool fuseUnk = false;
};

class BpeModel {
public:
    // `model` is the "model" object of tokenizer.json; options kvscope cannot honour are rejected.
    static BpeModel fromJson(const nlohmann::json& model, const std::string& source);
    BpeModel(std::unordered_map<std::string, int64_t> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
             const std::string& source);

    // Appends the ids of one word of raw bytes, each byte one character of the byte-level alphabet
    // (the words of a ByteLevel pre-tokenizer).
    void encodeBytes(const std::string& bytes, std::vector<int64_t>& out) const;
    // Appends the ids of one word of UTF-8 text, each Unicode character one symbol.
    void encodeText(const std::string& text, std::vector<int64_t>& out) const;

    std::optional<int64_t> tokenToId(const std::string& token) const;
    std::vector<std::string> idToToken() const;  // indexed by id

private:
    struct Merge {
        int64_t rank;
        int64_t result;
    };
    static std::uint64_t pairKey(int64_t a, int64_t b) {
        return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
    }
    // Collects a word's first symbols, handling characters outside the vocabulary.
    class Symbols;
    void mergeAll(std::vector<int64_t>& symbols) const;

    std::unordered_map<std::string, int64_t> vocab_;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::vector<int64_t> byteIds_;  // byte -> id of its byte-level character, -1 where the vocabulary lacks it
    std::vector<int64_t> fallbackIds_;  // byte -> id of <0xNN>, -1 where absent
    BpeOptions options_;
    std::string source_;
};

}  // namespace kvscope
