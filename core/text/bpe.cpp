// SPDX-License-Identifier: MIT
#include "core/text/bpe.h"

#include "core/text/byte_level.h"
#include "core/util/error.h"
#include "core/util/limits.h"

#include <limits>

namespace kvscope {

BpeModel BpeModel::fromJson(const nlohmann::json& m, const std::string& source) {
    const std::string type = m.value("type", "BPE");
    if (type != "BPE") throw FormatError(source + ": model type '" + type + "' is not supported (BPE only)");
    auto requireNullOr = [&](const char* key, auto allowed) {
        if (m.contains(key) && !m[key].is_null() && m[key] != allowed)
            throw FormatError(source + ": model." + key + " = " + m[key].dump() + " is not supported");
    };
    requireNullOr("dropout", 0.0);
    requireNullOr("continuing_subword_prefix", "");
    requireNullOr("end_of_word_suffix", "");
    requireNullOr("byte_fallback", false);

    std::unordered_map<std::string, int64_t> vocab;
    if (!m.contains("vocab") || !m["vocab"].is_object()) throw FormatError(source + ": model.vocab must be an object");
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() >= limits::kMaxVocabulary)
            throw FormatError(source + ": model.vocab['" + it.key() + "'] must be an integer id from 0 to " +
                              std::to_string(limits::kMaxVocabulary - 1) + " (is " + it.value().dump() + ")");
        vocab[it.key()] = it.value().get<int64_t>();
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& merge : m.value("merges", nlohmann::json::array())) {
        if (merge.is_string()) {  // "a b" (tokenizers < 0.20)
            const auto s = merge.get<std::string>();
            const auto space = s.find(' ');
            if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
                throw FormatError(source + ": merge '" + s + "' is not two tokens separated by one space");
            merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
            merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());  // ["a", "b"]
        } else {
            throw FormatError(source + ": merge " + merge.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    return BpeModel(std::move(vocab), merges, m.value("ignore_merges", false), source);
}

BpeModel::BpeModel(std::unordered_map<std::string, int64_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignoreMerges,
                   const std::string& source)
    : vocab_(std::move(vocab)), ignoreMerges_(ignoreMerges) {
    const auto& alphabet = byteLevelAlphabet();
    for (int b = 0; b < 256; ++b) {
        auto it = vocab_.find(alphabet[b]);
        if (it == vocab_.end())
            throw FormatError(source + ": vocabulary lacks the byte-level token for byte " + std::to_string(b) + " ('" +
                              alphabet[b] + "')");
        byteIds_.push_back(it->second);
    }
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [a, b] = merges[rank];
        auto ia = vocab_.find(a), ib = vocab_.find(b), ir = vocab_.find(a + b);
        if (ia == vocab_.end() || ib == vocab_.end() || ir == vocab_.end())
            throw FormatError(source + ": merge #" + std::to_string(rank) + " ('" + a + "' '" + b +
                              "') uses or makes a token missing from the vocabulary");
        merges_.emplace(pairKey(ia->second, ib->second), Merge{static_cast<int64_t>(rank), ir->second});
    }
}

void BpeModel::encodeBytes(const std::string& bytes, std::vector<int64_t>& out) const {
    if (bytes.empty()) return;
    if (ignoreMerges_) {
        auto whole = vocab_.find(toByteLevel(bytes));
        if (whole != vocab_.end()) {
            out.push_back(whole->second);
            return;
        }
    }
    std::vector<int64_t> symbols;
    symbols.reserve(bytes.size());
    for (unsigned char b : bytes) symbols.push_back(byteIds_[b]);
    while (symbols.size() > 1) {
        int64_t bestRank = std::numeric_limits<int64_t>::max();
        std::size_t bestAt = 0;
        int64_t bestResult = -1;
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
            auto it = merges_.find(pairKey(symbols[i], symbols[i + 1]));
            if (it != merges_.end() && it->second.rank < bestRank) {
                bestRank = it->second.rank;
                bestAt = i;
                bestResult = it->second.result;
            }
        }
        if (bestResult < 0) break;
        symbols[bestAt] = bestResult;
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(bestAt) + 1);
    }
    out.insert(out.end(), symbols.begin(), symbols.end());
}

std::optional<int64_t> BpeModel::tokenToId(const std::string& token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

std::vector<std::string> BpeModel::idToToken() const {
    std::vector<std::string> out;
    for (const auto& [token, id] : vocab_) {
        if (static_cast<std::size_t>(id) >= out.size()) out.resize(id + 1);
        out[id] = token;
    }
    return out;
}

}  // namespace kvscope
