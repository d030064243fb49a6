// SPDX-License-Identifier: MIT
#pragma once
// The BPE model of a byte-level tokenizer: a vocabulary (string -> id) and ranked merges. A
// pre-tokenized piece is mapped byte by byte onto the byte-level alphabet, then adjacent symbols are
// merged, lowest rank first (leftmost first among equals), until no listed merge applies.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvscope {

class BpeModel {
public:
    // `model` is the "model" object of tokenizer.json; options kvscope cannot honour are rejected.
    static BpeModel fromJson(const nlohmann::json& model, const std::string& source);
    BpeModel(std::unordered_map<std::string, int64_t> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, bool ignoreMerges,
             const std::string& source);

    // Appends the ids of one pre-tokenized piece of raw bytes.
    void encodeBytes(const std::string& bytes, std::vector<int64_t>& out) const;

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

    std::unordered_map<std::string, int64_t> vocab_;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::vector<int64_t> byteIds_;  // byte -> id of its byte-level character
    bool ignoreMerges_ = false;     // Llama 3: a piece that is itself a token is not split
};

}  // namespace kvscope
