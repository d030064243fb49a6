// SPDX-License-Identifier: MIT
#include "core/text/gguf_tokenizer.h"

#include "core/text/byte_level.h"
#include "core/util/error.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace kvscope {

using json = nlohmann::json;

namespace {

constexpr int64_t kControlToken = 3, kUserDefinedToken = 4;

std::vector<std::string> stringsOf(const GgufFile& f, const std::string& key) {
    std::vector<std::string> out;
    for (const auto& v : f.array(key)) {
        if (!v.is_string()) throw FormatError(f.path() + ": GGUF metadata '" + key + "' holds a non-string");
        // transformers decodes every string as strict UTF-8 and fails on any other bytes; so does this.
        if (sanitizeUtf8(v.get<std::string>()) != v.get<std::string>())
            throw FormatError(f.path() + ": GGUF metadata '" + key + "' entry " + std::to_string(out.size()) +
                              " is not valid UTF-8");
        out.push_back(v.get<std::string>());
    }
    return out;
}

std::vector<int64_t> tokenTypesOf(const GgufFile& f, std::size_t n) {
    std::vector<int64_t> out;
    if (!f.has("tokenizer.ggml.token_type")) return out;
    for (const auto& v : f.array("tokenizer.ggml.token_type")) {
        if (!v.is_number_integer())
            throw FormatError(f.path() + ": GGUF metadata 'tokenizer.ggml.token_type' holds a non-integer");
        out.push_back(v.get<int64_t>());
    }
    if (out.size() != n)
        throw FormatError(f.path() + ": GGUF metadata 'tokenizer.ggml.token_type' has " + std::to_string(out.size()) +
                          " entries for " + std::to_string(n) + " tokens");
    return out;
}

std::optional<int64_t> tokenIdOf(const GgufFile& f, const std::string& key, std::size_t vocabulary) {
    if (!f.has(key)) return std::nullopt;
    const int64_t id = f.integer(key);
    if (id < 0 || static_cast<std::size_t>(id) >= vocabulary)
        throw FormatError(f.path() + ": GGUF metadata '" + key + "' is " + std::to_string(id) + ", outside the " +
                          std::to_string(vocabulary) + "-token vocabulary");
    return id;
}

// The characters of valid UTF-8 text (stringsOf checks it), each as its bytes: Python's str indexing.
std::vector<std::string> codePoints(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

// transformers' generate_merges(vocab, scores): every split of a token into two tokens of the
// vocabulary, ordered by the token's score (highest first), then the longer left piece, the longer
// right piece; ties keep the vocabulary's order.
bool allInByteAlphabet(const std::string& token) {
    static const std::set<std::string> alphabet(byteLevelAlphabet().begin(), byteLevelAlphabet().end());
    const auto characters = codePoints(token);
    return std::all_of(characters.begin(), characters.end(),
                       [](const std::string& c) { return alphabet.count(c) != 0; });
}

json mergesFromScores(const std::vector<std::string>& tokens, const std::vector<double>& scores) {
    std::map<std::string, int64_t> id;  // the last index of each spelling, as a Python dict keeps it
    for (std::size_t i = 0; i < tokens.size(); ++i) id[tokens[i]] = static_cast<int64_t>(i);
    struct Merge {
        std::string left, right;
        double score;
        std::size_t leftLength, rightLength;
    };
    std::vector<Merge> merges;
    std::set<std::string> seen;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (!seen.insert(tokens[i]).second) continue;  // a dict iterates each key once, at its first place
        const double score = scores[static_cast<std::size_t>(id[tokens[i]])];
        const auto chars = codePoints(tokens[i]);
        std::vector<Merge> local;
        std::string left;
        for (std::size_t k = 1; k < chars.size(); ++k) {
            left += chars[k - 1];
            const std::string right = tokens[i].substr(left.size());
            if (id.count(left) && id.count(right)) local.push_back({left, right, score, k, chars.size() - k});
        }
        std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
            return std::pair(id[a.left], id[a.right]) < std::pair(id[b.left], id[b.right]);
        });
        merges.insert(merges.end(), local.begin(), local.end());
    }
    std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
        return std::tuple(a.score, a.leftLength, a.rightLength) > std::tuple(b.score, b.leftLength, b.rightLength);
    });
    json out = json::array();
    for (const auto& m : merges) out.push_back({m.left, m.right});
    return out;
}

json mergesOf(const GgufFile& f, const std::vector<std::string>& tokens) {
    if (f.has("tokenizer.ggml.merges")) {
        json out = json::array();
        for (const auto& m : stringsOf(f, "tokenizer.ggml.merges")) {
            const auto space = m.find(' ');
            if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos)
                throw FormatError(f.path() + ": GGUF metadata 'tokenizer.ggml.merges' entry '" + m +
                                  "' is not two tokens separated by one space");
            out.push_back({m.substr(0, space), m.substr(space + 1)});
        }
        return out;
    }
    std::vector<double> scores;
    for (const auto& v : f.array("tokenizer.ggml.scores")) scores.push_back(v.is_number() ? v.get<double>() : 0.0);
    if (scores.size() != tokens.size())
        throw FormatError(f.path() + ": GGUF metadata 'tokenizer.ggml.scores' has " + std::to_string(scores.size()) +
                          " entries for " + std::to_string(tokens.size()) + " tokens");
    return mergesFromScores(tokens, scores);
}

// transformers' GGUF_PRE_TOKENIZER_SPLITS: a byte-level vocabulary whose tokenizer.ggml.pre names one
// of these is split by its pattern (then mapped to bytes); any other keeps GPT-2's own.
std::optional<std::string> splitPatternOf(const std::string& pre) {
    static const std::string llama3 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    static const std::string qwen2 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    for (const char* name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx"})
        if (pre == name) return llama3;
    for (const char* name : {"qwen2", "deepseek-r1-qwen"})
        if (pre == name) return qwen2;
    return std::nullopt;
}

// transformers' tokenizer classes add their named special tokens (bos, eos, unk, pad) as special
// added tokens, matched whole in text: the class's defaults (LlamaTokenizer "<unk>", "<s>", "</s>";
// GPT2Tokenizer "<|endoftext|>"), then the file's own tokenizer.ggml.*_token_id. So "<unk>" in a
// prompt is one token even where the file marks it "unknown" rather than "control". The ids of
// those in the vocabulary; transformers would append a name the vocabulary lacks as a new token,
// past the model's embedding, which kvscope does not.
std::vector<std::size_t> namedSpecialTokens(const GgufFile& f, const std::vector<std::string>& tokens,
                                            const json& vocab, bool byteLevel) {
    std::vector<std::string> names;
    if (byteLevel)
        names = {"<|endoftext|>"};
    else
        names = {"<unk>", "<s>", "</s>"};
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                            "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"})
        if (const auto id = tokenIdOf(f, key, tokens.size())) names.push_back(tokens[static_cast<std::size_t>(*id)]);
    std::vector<std::size_t> ids;
    for (const auto& name : names)
        if (const auto at = vocab.find(name); at != vocab.end()) ids.push_back(at->get<std::size_t>());
    return ids;
}

json postProcessor(const std::optional<std::string>& bos, const std::optional<std::string>& eos,
                   const std::optional<int64_t>& bosId, const std::optional<int64_t>& eosId) {
    json single = json::array(), specials = json::object();
    if (bos) {
        single.push_back({{"SpecialToken", {{"id", *bos}, {"type_id", 0}}}});
        specials[*bos] = {{"id", *bos}, {"ids", {*bosId}}, {"tokens", {*bos}}};
    }
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (eos) {
        single.push_back({{"SpecialToken", {{"id", *eos}, {"type_id", 0}}}});
        specials[*eos] = {{"id", *eos}, {"ids", {*eosId}}, {"tokens", {*eos}}};
    }
    return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", json::array()}, {"special_tokens", specials}};
}

}  // namespace

namespace {

// The added tokens: control tokens (special) and user-defined ones, then the special ids the
// metadata names, each once.
json addedTokensJson(const GgufFile& f, const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                     const json& vocab, bool byteLevel) {
    json added = json::array();
    std::set<std::size_t> addedIds;
    auto addToken = [&](std::size_t i, bool special) {
        if (!addedIds.insert(i).second) return;
        added.push_back({{"id", i},
                         {"content", tokens[i]},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", special}});
    };
    for (std::size_t i = 0; i < types.size(); ++i) {
        const bool control = types[i] == kControlToken && (!byteLevel || allInByteAlphabet(tokens[i]));
        if (control || types[i] == kUserDefinedToken) addToken(i, control);
    }
    for (const std::size_t i : namedSpecialTokens(f, tokens, vocab, byteLevel)) addToken(i, true);
    return added;
}

// gpt2 (byte-level BPE): GPT-2's byte alphabet, split first by the pre-tokenizer's pattern where
// tokenizer.ggml.pre names one.
void setByteLevelSteps(const GgufFile& f, json& model, json& j) {
    model.update(
        {{"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}});
    const json byteLevelStep = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    j["decoder"] = byteLevelStep;
    j["pre_tokenizer"] = byteLevelStep;
    const std::string pre = f.has("tokenizer.ggml.pre") ? f.string("tokenizer.ggml.pre") : "";
    if (const auto pattern = splitPatternOf(pre)) {
        json bytes = byteLevelStep;
        bytes["use_regex"] = false;
        j["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", *pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
              bytes}}};
    }
}

// llama (SentencePiece BPE): U+2581 for spaces, bytes as <0xNN> tokens.
void setSentencePieceSteps(json& model, json& j) {
    model.update({{"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},
                  {"byte_fallback", true}});
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
}

}  // namespace

json ggufTokenizerJson(const GgufFile& f) {
    const std::string type = f.string("tokenizer.ggml.model");
    if (type != "gpt2" && type != "llama")
        throw FormatError(f.path() + ": GGUF metadata 'tokenizer.ggml.model' is '" + type +
                          "' (kvscope builds gpt2 and llama tokenizers)");
    const bool byteLevel = type == "gpt2";
    const auto tokens = stringsOf(f, "tokenizer.ggml.tokens");
    const auto types = tokenTypesOf(f, tokens.size());

    json vocab = json::object();
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        // A byte-level vocabulary spells every token in GPT-2's byte alphabet; one that is not (an
        // added token written as text) is respelled from its UTF-8 bytes, as transformers does.
        const std::string spelled = byteLevel && !allInByteAlphabet(tokens[i]) ? toByteLevel(tokens[i]) : tokens[i];
        vocab[spelled] = static_cast<int64_t>(i);
    }
    const bool addBos =
        f.has("tokenizer.ggml.add_bos_token") ? f.metadata()["tokenizer.ggml.add_bos_token"] == true : !byteLevel;
    const bool addEos = f.has("tokenizer.ggml.add_eos_token") && f.metadata()["tokenizer.ggml.add_eos_token"] == true;
    const auto bosId = tokenIdOf(f, "tokenizer.ggml.bos_token_id", tokens.size());
    const auto eosId = tokenIdOf(f, "tokenizer.ggml.eos_token_id", tokens.size());
    const auto nameOf = [&](bool wanted, const std::optional<int64_t>& id) -> std::optional<std::string> {
        return wanted && id ? std::optional(tokens[static_cast<std::size_t>(*id)]) : std::nullopt;
    };

    json model = {{"type", "BPE"},          {"dropout", nullptr}, {"unk_token", nullptr},
                  {"ignore_merges", false}, {"vocab", vocab},     {"merges", mergesOf(f, tokens)}};
    json j = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", addedTokensJson(f, tokens, types, vocab, byteLevel)},
              {"normalizer", nullptr},
              {"post_processor", postProcessor(nameOf(addBos, bosId), nameOf(addEos, eosId), bosId, eosId)}};
    if (byteLevel)
        setByteLevelSteps(f, model, j);
    else
        setSentencePieceSteps(model, j);
    j["model"] = model;
    return j;
}

GgufChatTemplate ggufChatTemplate(const GgufFile& f) {
    GgufChatTemplate t;
    if (f.has("tokenizer.chat_template")) t.text = f.string("tokenizer.chat_template");
    if (sanitizeUtf8(t.text) != t.text)
        throw FormatError(f.path() + ": GGUF metadata 'tokenizer.chat_template' is not valid UTF-8");
    if (!f.has("tokenizer.ggml.tokens")) return t;
    const auto tokens = stringsOf(f, "tokenizer.ggml.tokens");
    for (const auto& [name, key] : {std::pair{"bos_token", "bos_token_id"},
                                    {"eos_token", "eos_token_id"},
                                    {"unk_token", "unknown_token_id"},
                                    {"pad_token", "padding_token_id"}})
        if (const auto id = tokenIdOf(f, std::string("tokenizer.ggml.") + key, tokens.size()))
            t.specialTokens[name] = tokens[static_cast<std::size_t>(*id)];
    return t;
}

}  // namespace kvscope
