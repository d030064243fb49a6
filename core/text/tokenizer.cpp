// SPDX-License-Identifier: MIT
#include "core/text/tokenizer.h"
#include "core/util/json_ids.h"

#include "core/text/byte_level.h"
#include "core/text/bpe.h"
#include "core/text/regex.h"
#include "core/util/error.h"
#include "core/util/limits.h"
#include "core/util/parse.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kvscope {
namespace {

using nlohmann::json;

// ---- normalizer -----------------------------------------------------------------------------

enum class UnicodeForm { NFC, NFD, NFKC, NFKD };

std::string normalizeUnicode(const std::string& text, UnicodeForm form) {
    int options = UTF8PROC_STABLE;
    switch (form) {
    case UnicodeForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    if (text.empty()) return text;
    utf8proc_uint8_t* out = nullptr;
    const auto n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(options));
    if (n < 0) throw UsageError("input text is not valid UTF-8 (" + std::string(utf8proc_errmsg(n)) + ")");
    std::string result(reinterpret_cast<char*>(out), static_cast<std::size_t>(n));
    std::free(out);
    return result;
}

std::vector<UnicodeForm> parseNormalizer(const json& j, const std::string& source) {
    std::vector<UnicodeForm> steps;
    if (j.is_null()) return steps;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& n : j.at("normalizers")) {
            auto inner = parseNormalizer(n, source);
            steps.insert(steps.end(), inner.begin(), inner.end());
        }
    } else if (type == "NFC")
        steps.push_back(UnicodeForm::NFC);
    else if (type == "NFD")
        steps.push_back(UnicodeForm::NFD);
    else if (type == "NFKC")
        steps.push_back(UnicodeForm::NFKC);
    else if (type == "NFKD")
        steps.push_back(UnicodeForm::NFKD);
    else
        throw FormatError(source + ": normalizer type '" + type +
                          "' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)");
    return steps;
}

// ---- pre-tokenizer ----------------------------------------------------------------------------

// The pattern GPT-2's ByteLevel pre-tokenizer uses when use_regex is true.
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct SplitStep {
    std::shared_ptr<Regex> regex;
    bool removeMatches = false;  // behavior "Removed" (else "Isolated")
};

struct PreTokenizer {
    std::vector<SplitStep> splits;  // applied in order before the byte-level mapping
    bool byteLevel = false;
    bool addPrefixSpace = false;

    std::vector<std::string> apply(const std::string& text) const {
        std::vector<std::string> pieces{text};
        for (const auto& step : splits) {
            std::vector<std::string> next;
            for (const auto& piece : pieces)
                for (auto& part : step.regex->split(piece, step.removeMatches)) next.push_back(std::move(part));
            pieces = std::move(next);
        }
        if (addPrefixSpace)
            for (auto& p : pieces)
                if (p.empty() || p[0] != ' ') p.insert(p.begin(), ' ');
        return pieces;
    }
};

void parsePreTokenizer(const json& j, const std::string& source, PreTokenizer& out) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& p : j.at("pretokenizers")) parsePreTokenizer(p, source, out);
        return;
    }
    if (out.byteLevel) throw FormatError(source + ": pre_tokenizer '" + type + "' after ByteLevel is not supported");
    if (type == "Split") {
        if (j.value("invert", false))
            throw FormatError(source + ": Split pre_tokenizer with invert=true is not supported");
        const std::string behavior = j.value("behavior", "Isolated");
        if (behavior != "Isolated" && behavior != "Removed")
            throw FormatError(source + ": Split behavior '" + behavior + "' is not supported (Isolated, Removed)");
        const json& pattern = j.at("pattern");
        SplitStep step;
        const bool literal = pattern.contains("String");
        if (!literal && !pattern.contains("Regex"))
            throw FormatError(source + ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
        try {
            step.regex = std::make_shared<Regex>(pattern[literal ? "String" : "Regex"].get<std::string>(), literal);
        } catch (const FormatError& e) {
            throw FormatError(source + ": " + e.what());
        }
        step.removeMatches = behavior == "Removed";
        out.splits.push_back(std::move(step));
    } else if (type == "ByteLevel") {
        out.byteLevel = true;
        out.addPrefixSpace = j.value("add_prefix_space", false);
        if (j.value("use_regex", true)) out.splits.push_back({std::make_shared<Regex>(kGpt2Pattern, false), false});
    } else {
        throw FormatError(source + ": pre_tokenizer type '" + type +
                          "' is not supported (supported: Split, ByteLevel, Sequence)");
    }
}

// ---- post-processor ---------------------------------------------------------------------------

// For a single sequence: ids to put before and after it when add_special_tokens is on.
struct PostProcessor {
    std::vector<int64_t> prefix, suffix;
};

void parsePostProcessor(const json& j, const std::string& source, PostProcessor& out) {
    if (j.is_null()) return;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& p : j.at("processors")) parsePostProcessor(p, source, out);
    } else if (type == "ByteLevel") {
        // Only adjusts offsets; ids are unchanged.
    } else if (type == "TemplateProcessing") {
        bool seenSequence = false;
        for (const auto& item : j.at("single")) {
            if (item.contains("Sequence")) {
                seenSequence = true;
                continue;
            }
            if (!item.contains("SpecialToken"))
                throw FormatError(source + ": TemplateProcessing item is neither Sequence nor SpecialToken");
            const std::string name = item["SpecialToken"].at("id").get<std::string>();
            const json& specials = j.at("special_tokens");
            if (!specials.contains(name))
                throw FormatError(source + ": TemplateProcessing names special token '" + name +
                                  "' not in special_tokens");
            auto& target = seenSequence ? out.suffix : out.prefix;
            for (const auto& id : specials[name].at("ids"))
                target.push_back(tokenIdFromJson(id, source + ": special_tokens '" + name + "' ids"));
        }
    } else {
        throw FormatError(source + ": post_processor type '" + type +
                          "' is not supported (supported: ByteLevel, TemplateProcessing, Sequence)");
    }
}

void checkDecoder(const json& j, const std::string& source) {
    if (j.is_null()) throw FormatError(source + ": no decoder declared; kvscope decodes byte-level BPE only");
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        for (const auto& d : j.at("decoders")) checkDecoder(d, source);
    } else if (type != "ByteLevel") {
        throw FormatError(source + ": decoder type '" + type + "' is not supported (supported: ByteLevel)");
    }
}

bool isAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// A piece of input during encoding: either plain text still to tokenize, or a matched added token.
struct Segment {
    std::string text;
    int64_t addedId = -1;
};

}  // namespace

// ---- the tokenizer ----------------------------------------------------------------------------

struct Tokenizer::Impl {
    std::string source;
    std::vector<UnicodeForm> normalizer;
    PreTokenizer preTokenizer;
    std::unique_ptr<BpeModel> bpe;
    PostProcessor post;
    std::vector<AddedToken> added;
    std::map<std::string, int64_t> addedByContent;
    std::vector<std::string> idToToken;  // vocab + added tokens

    std::string normalize(std::string text) const {
        for (auto form : normalizer) text = normalizeUnicode(text, form);
        return text;
    }

    // Splits plain-text segments around added tokens whose `normalized` flag equals `normalizedPass`.
    std::vector<Segment> splitAdded(const std::vector<Segment>& in, bool normalizedPass) const {
        std::vector<Segment> out;
        for (const auto& seg : in) {
            if (seg.addedId >= 0) {
                out.push_back(seg);
                continue;
            }
            const std::string& t = seg.text;
            std::size_t plainStart = 0, i = 0;
            while (i < t.size()) {
                const AddedToken* best = nullptr;
                for (const auto& tok : added)
                    if (tok.normalized == normalizedPass && !tok.content.empty() &&
                        (!best || tok.content.size() > best->content.size()) &&
                        t.compare(i, tok.content.size(), tok.content) == 0)
                        best = &tok;
                if (!best) {
                    ++i;
                    continue;
                }
                std::size_t matchStart = i, matchEnd = i + best->content.size();
                if (best->lstrip)
                    while (matchStart > plainStart && isAsciiSpace(t[matchStart - 1])) --matchStart;
                if (best->rstrip)
                    while (matchEnd < t.size() && isAsciiSpace(t[matchEnd])) ++matchEnd;
                if (matchStart > plainStart) out.push_back({t.substr(plainStart, matchStart - plainStart), -1});
                out.push_back({best->content, best->id});
                plainStart = i = matchEnd;
            }
            if (plainStart < t.size()) out.push_back({t.substr(plainStart), -1});
        }
        return out;
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::fromFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FormatError(path + ": cannot open tokenizer file");
    std::stringstream buffer;
    buffer << in.rdbuf();
    return fromJson(buffer.str(), path);
}

Tokenizer Tokenizer::fromModelDir(const std::string& dir) {
    const auto path = std::filesystem::path(dir) / "tokenizer.json";
    if (!std::filesystem::exists(path))
        throw FormatError(path.string() + ": not found (kvscope reads Hugging Face tokenizer.json files)");
    return fromFile(path.string());
}

Tokenizer Tokenizer::fromJson(const std::string& text, const std::string& source) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        throw FormatError(source + ": not valid JSON (" + e.what() + ")");
    }
    auto impl = std::make_unique<Impl>();
    impl->source = source;
    try {
        if (!j.is_object() || !j.contains("model")) throw FormatError(source + ": expected an object with a 'model'");
        impl->normalizer = parseNormalizer(j.value("normalizer", json()), source);
        parsePreTokenizer(j.value("pre_tokenizer", json()), source, impl->preTokenizer);
        if (!impl->preTokenizer.byteLevel)
            throw FormatError(source + ": pre_tokenizer has no ByteLevel step; kvscope supports byte-level BPE only");
        impl->bpe = std::make_unique<BpeModel>(BpeModel::fromJson(j["model"], source));
        parsePostProcessor(j.value("post_processor", json()), source, impl->post);
        checkDecoder(j.value("decoder", json()), source);
        for (const auto& a : j.value("added_tokens", json::array())) {
            AddedToken t;
            t.content = a.at("content").get<std::string>();
            t.id = tokenIdFromJson(a.at("id"), source + ": added token '" + t.content + "' id");
            t.special = a.value("special", false);
            t.normalized = a.value("normalized", !t.special);
            t.lstrip = a.value("lstrip", false);
            t.rstrip = a.value("rstrip", false);
            if (a.value("single_word", false))
                throw FormatError(source + ": added token '" + t.content +
                                  "' has single_word=true, which is not supported");
            impl->addedByContent[t.content] = t.id;
            impl->added.push_back(std::move(t));
        }
    } catch (const json::exception& e) {
        throw FormatError(source + ": unexpected structure (" + e.what() + ")");
    }
    impl->idToToken = impl->bpe->idToToken();
    for (const auto& t : impl->added) {  // ids below limits::kMaxVocabulary (tokenIdFromJson)
        if (static_cast<std::size_t>(t.id) >= impl->idToToken.size()) impl->idToToken.resize(t.id + 1);
        impl->idToToken[t.id] = t.content;
    }
    return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool addSpecialTokens) const {
    std::vector<Segment> segments = impl_->splitAdded({{text, -1}}, /*normalizedPass=*/false);
    for (auto& s : segments)
        if (s.addedId < 0) s.text = impl_->normalize(s.text);
    segments = impl_->splitAdded(segments, /*normalizedPass=*/true);

    std::vector<int64_t> ids;
    if (addSpecialTokens) ids = impl_->post.prefix;
    for (const auto& s : segments) {
        if (s.addedId >= 0) {
            ids.push_back(s.addedId);
            continue;
        }
        for (const auto& piece : impl_->preTokenizer.apply(s.text)) impl_->bpe->encodeBytes(piece, ids);
    }
    if (addSpecialTokens) ids.insert(ids.end(), impl_->post.suffix.begin(), impl_->post.suffix.end());
    return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skipSpecialTokens) const {
    std::string bytes;
    for (int64_t id : ids) {
        if (id < 0 || id >= vocabSize())
            throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocabSize()) + ")");
        const std::string& token = impl_->idToToken[id];
        auto added = impl_->addedByContent.find(token);
        if (added != impl_->addedByContent.end() && added->second == id) {
            const auto& info = *std::find_if(impl_->added.begin(), impl_->added.end(),
                                             [&](const AddedToken& t) { return t.id == id; });
            if (skipSpecialTokens && info.special) continue;
        }
        // HF's ByteLevel decoder: characters of the byte-level alphabet become their bytes; a token
        // with any other character is taken verbatim.
        std::string raw;
        if (fromByteLevel(token, raw))
            bytes += raw;
        else
            bytes += token;
    }
    return sanitizeUtf8(bytes);
}

int64_t Tokenizer::vocabSize() const { return static_cast<int64_t>(impl_->idToToken.size()); }

std::optional<int64_t> Tokenizer::tokenToId(const std::string& token) const {
    auto a = impl_->addedByContent.find(token);
    if (a != impl_->addedByContent.end()) return a->second;
    return impl_->bpe->tokenToId(token);
}

std::string Tokenizer::idToToken(int64_t id) const {
    return (id >= 0 && id < vocabSize()) ? impl_->idToToken[id] : std::string();
}

const std::vector<AddedToken>& Tokenizer::addedTokens() const { return impl_->added; }

std::vector<int64_t> parseIdList(const std::string& text, const std::string& source) {
    std::vector<int64_t> ids;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        item.erase(0, item.find_first_not_of(" \t\n"));
        item.erase(item.find_last_not_of(" \t\n") + 1);
        if (item.empty()) throw UsageError(source + ": empty element in id list '" + text + "'");
        const auto id = parseNonNegativeInt(item);
        if (!id) throw UsageError(source + ": '" + item + "' in id list is not a non-negative integer");
        ids.push_back(*id);
    }
    if (ids.empty()) throw UsageError(source + ": id list is empty");
    return ids;
}

}  // namespace kvscope
