// SPDX-License-Identifier: MIT
#include "core/text/bpe.h"

#include "core/text/byte_level.h"
#include "core/text/tokenizer_steps.h"
#include "core/util/error.h"
#include "core/util/limits.h"

#include <cstdio>
#include <queue>

namespace kvscope {
namespace {

std::unordered_map<std::string, int64_t> vocabularyOf(const nlohmann::json& m, const std::string& source) {
    std::unordered_map<std::string, int64_t> vocab;
    if (!m.contains("vocab") || !m["vocab"].is_object()) throw FormatError(source + ": model.vocab must be an object");
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() >= limits::kMaxVocabulary)
            throw FormatError(source + ": model.vocab['" + it.key() + "'] must be an integer id from 0 to " +
                              std::to_string(limits::kMaxVocabulary - 1) + " (is " + it.value().dump() + ")");
        vocab[it.key()] = it.value().get<int64_t>();
    }
    return vocab;
}

std::vector<std::pair<std::string, std::string>> mergesOf(const nlohmann::json& m, const std::string& source) {
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
    return merges;
}

bool optionalFlag(const nlohmann::json& m, const char* key, const std::string& source) {
    if (!m.contains(key) || m[key].is_null()) return false;
    if (!m[key].is_boolean()) throw FormatError(source + ": model." + key + " must be true or false");
    return m[key].get<bool>();
}

}  // namespace

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
    BpeOptions options;
    options.ignoreMerges = optionalFlag(m, "ignore_merges", source);
    options.byteFallback = optionalFlag(m, "byte_fallback", source);
    options.fuseUnk = optionalFlag(m, "fuse_unk", source);
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
        if (!m["unk_token"].is_string()) throw FormatError(source + ": model.unk_token must be a string or null");
        options.unkToken = m["unk_token"].get<std::string>();
    }
    return BpeModel(vocabularyOf(m, source), mergesOf(m, source), std::move(options), source);
}

BpeModel::BpeModel(std::unordered_map<std::string, int64_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& source)
    : vocab_(std::move(vocab)), options_(std::move(options)), source_(source) {
    const auto& alphabet = byteLevelAlphabet();
    for (int b = 0; b < 256; ++b) {
        auto character = vocab_.find(alphabet[b]);
        byteIds_.push_back(character == vocab_.end() ? -1 : character->second);
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto fallback = vocab_.find(name);
        fallbackIds_.push_back(fallback == vocab_.end() ? -1 : fallback->second);
    }
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [a, b] = merges[rank];
        auto ia = vocab_.find(a), ib = vocab_.find(b), ir = vocab_.find(a + b);
        if (ia == vocab_.end() || ib == vocab_.end() || ir == vocab_.end())
            throw FormatError(source + ": merge #" + std::to_string(rank) + " ('" + a + "' '" + b +
                              "') uses or makes a token missing from the vocabulary");
        // A pair listed twice takes its last rank: tokenizers collects the merges into a map in order.
        merges_.insert_or_assign(pairKey(ia->second, ib->second), Merge{static_cast<int64_t>(rank), ir->second});
    }
}

// A word's first symbols in the order `tokenizers`' merge_word makes them. A pending unknown token
// goes in before the next known character; byte-fallback tokens go in without flushing it, as there.
class BpeModel::Symbols {
public:
    explicit Symbols(const BpeModel& model) : model_(model) {}

    void add(int64_t id) {
        flushUnknown();
        ids_.push_back(id);
    }
    void addUnknown(const std::string& character) {
        if (model_.options_.byteFallback && addFallback(character)) return;
        if (!model_.options_.unkToken) return;  // dropped
        auto unk = model_.vocab_.find(*model_.options_.unkToken);
        if (unk == model_.vocab_.end())
            throw FormatError(model_.source_ + ": model.unk_token '" + *model_.options_.unkToken +
                              "' is not in the vocabulary (needed for a character outside it)");
        if (pendingUnknown_ >= 0 && !model_.options_.fuseUnk) ids_.push_back(pendingUnknown_);
        pendingUnknown_ = unk->second;
    }
    std::vector<int64_t> finish() {
        flushUnknown();
        return std::move(ids_);
    }

private:
    bool addFallback(const std::string& character) {
        for (unsigned char b : character)
            if (model_.fallbackIds_[b] < 0) return false;
        for (unsigned char b : character) ids_.push_back(model_.fallbackIds_[b]);
        return true;
    }
    void flushUnknown() {
        if (pendingUnknown_ >= 0) ids_.push_back(pendingUnknown_);
        pendingUnknown_ = -1;
    }
    const BpeModel& model_;
    std::vector<int64_t> ids_;
    int64_t pendingUnknown_ = -1;
};

void BpeModel::encodeBytes(const std::string& bytes, std::vector<int64_t>& out) const {
    if (bytes.empty()) return;
    if (options_.ignoreMerges) {
        auto whole = vocab_.find(toByteLevel(bytes));
        if (whole != vocab_.end()) {
            out.push_back(whole->second);
            return;
        }
    }
    Symbols symbols(*this);
    for (unsigned char b : bytes) {
        if (byteIds_[b] >= 0)
            symbols.add(byteIds_[b]);
        else
            symbols.addUnknown(byteLevelAlphabet()[b]);
    }
    std::vector<int64_t> ids = symbols.finish();
    mergeAll(ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encodeText(const std::string& text, std::vector<int64_t>& out) const {
    if (text.empty()) return;
    if (options_.ignoreMerges) {
        auto whole = vocab_.find(text);
        if (whole != vocab_.end()) {
            out.push_back(whole->second);
            return;
        }
    }
    Symbols symbols(*this);
    std::size_t at = 0;
    for (std::size_t length : utf8CharLengths(text)) {
        const std::string character = text.substr(at, length);
        auto id = vocab_.find(character);
        if (id != vocab_.end())
            symbols.add(id->second);
        else
            symbols.addUnknown(character);
        at += length;
    }
    std::vector<int64_t> ids = symbols.finish();
    mergeAll(ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

// Word::merge_all: a queue of adjacent pairs that have a merge, lowest rank first and leftmost among
// equals; an entry whose pair has changed since it was queued is skipped. O(n log n), so a text
// that no pre-tokenizer splits (SentencePiece BPE) is one long word without quadratic time.
void BpeModel::mergeAll(std::vector<int64_t>& symbols) const {
    const auto n = static_cast<int64_t>(symbols.size());
    if (n < 2) return;
    std::vector<int64_t> prev(n), next(n);
    std::vector<char> alive(n, 1);
    for (int64_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1;
    struct Candidate {
        int64_t rank, pos, result;
    };
    auto later = [](const Candidate& a, const Candidate& b) {
        return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
    auto consider = [&](int64_t left) {
        if (left < 0 || next[left] >= n) return;
        auto it = merges_.find(pairKey(symbols[left], symbols[next[left]]));
        if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result});
    };
    for (int64_t i = 0; i + 1 < n; ++i) consider(i);
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        if (!alive[top.pos] || next[top.pos] >= n) continue;
        const int64_t right = next[top.pos];
        auto it = merges_.find(pairKey(symbols[top.pos], symbols[right]));
        if (it == merges_.end() || it->second.result != top.result) continue;  // queued for a pair since merged
        symbols[top.pos] = top.result;
        alive[right] = 0;
        next[top.pos] = next[right];
        if (next[right] < n) prev[next[right]] = top.pos;
        consider(prev[top.pos]);
        consider(top.pos);
    }
    std::size_t kept = 0;
    for (int64_t i = 0; i < n; ++i)
        if (alive[i]) symbols[kept++] = symbols[i];
    symbols.resize(kept);
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
