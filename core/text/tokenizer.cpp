// SPDX-License-Identifier: MIT
#include "core/text/tokenizer.h"

#include "core/text/gguf_tokenizer.h"
#include "core/util/json_ids.h"

#include "core/text/byte_level.h"
#include "core/text/bpe.h"
#include "core/text/regex.h"
#include "core/text/tokenizer_steps.h"
#include "core/util/error.h"
#include "core/util/file_names.h"
#include "core/util/limits.h"
#include "core/util/parse.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

namespace kvscope {
namespace {

using nlohmann::json;

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

// A piece of input during encoding: either plain text still to tokenize, or a matched added token.
struct Segment {
    std::string text;
    int64_t addedId = -1;
    bool atInputStart = false;  // begins at offset 0 of the text given to encode()
};

// The whitespace character that ends just before `at` (lstrip) or starts at `at` (rstrip), or 0.
std::size_t whitespaceBefore(const std::string& t, std::size_t at) {
    for (std::size_t n = 1; n <= 4 && n <= at; ++n) {
        const auto d = decodeUtf8(t.substr(at - n, n));
        if (d.size() == 1 && d[0] != 0xFFFD) return isUnicodeWhitespace(d[0]) ? n : 0;
    }
    return 0;
}
std::size_t whitespaceAt(const std::string& t, std::size_t at) {
    const auto lengths = utf8CharLengths(t.substr(at, 4));
    if (lengths.empty()) return 0;
    const auto d = decodeUtf8(t.substr(at, lengths[0]));
    return d.size() == 1 && isUnicodeWhitespace(d[0]) ? lengths[0] : 0;
}

}  // namespace

// ---- the tokenizer ----------------------------------------------------------------------------

struct Tokenizer::Impl {
    std::string source;
    Normalizer normalizer;
    PreTokenizer preTokenizer;
    Decoder decoder;
    std::unique_ptr<BpeModel> bpe;
    PostProcessor post;
    std::vector<AddedToken> added;
    std::map<std::string, int64_t> addedByContent;
    std::set<int64_t> specialIds;
    std::vector<std::string> idToToken;  // vocab + added tokens

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
                // lstrip / rstrip swallow Unicode whitespace (Rust's char::is_whitespace) around it.
                if (best->lstrip)
                    for (std::size_t n; matchStart > plainStart && (n = whitespaceBefore(t, matchStart)) > 0;)
                        matchStart -= n;
                if (best->rstrip)
                    for (std::size_t n; matchEnd < t.size() && (n = whitespaceAt(t, matchEnd)) > 0;) matchEnd += n;
                if (matchStart > plainStart)
                    out.push_back(
                        {t.substr(plainStart, matchStart - plainStart), -1, seg.atInputStart && plainStart == 0});
                out.push_back({best->content, best->id});
                plainStart = i = matchEnd;
            }
            if (plainStart < t.size()) out.push_back({t.substr(plainStart), -1, seg.atInputStart && plainStart == 0});
        }
        return out;
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::fromFile(const std::string& path) {
    const auto bytes = fileContents(path);
    if (!bytes) throw FormatError(path + ": cannot open tokenizer file");
    return fromJson(*bytes, path);
}

Tokenizer Tokenizer::fromModelDir(const std::string& dir) {
    if (isGgufFile(dir)) {
        const GgufFile file(dir);
        return fromJson(ggufTokenizerJson(file).dump(), dir + " (GGUF tokenizer metadata)");
    }
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
        impl->normalizer = Normalizer::fromJson(j.value("normalizer", json()), source);
        impl->preTokenizer = PreTokenizer::fromJson(j.value("pre_tokenizer", json()), source);
        impl->bpe = std::make_unique<BpeModel>(BpeModel::fromJson(j["model"], source));
        parsePostProcessor(j.value("post_processor", json()), source, impl->post);
        impl->decoder = Decoder::fromJson(j.value("decoder", json()), source);
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
            if (t.special) impl->specialIds.insert(t.id);
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
    std::vector<Segment> segments = impl_->splitAdded({{text, -1, true}}, /*normalizedPass=*/false);
    for (auto& s : segments)
        if (s.addedId < 0) s.text = impl_->normalizer.apply(s.text);
    segments = impl_->splitAdded(segments, /*normalizedPass=*/true);

    std::vector<int64_t> ids;
    if (addSpecialTokens) ids = impl_->post.prefix;
    for (const auto& s : segments) {
        if (s.addedId >= 0) {
            ids.push_back(s.addedId);
            continue;
        }
        for (const auto& piece : impl_->preTokenizer.apply({{s.text, s.atInputStart}})) {
            if (impl_->preTokenizer.byteLevel())
                impl_->bpe->encodeBytes(piece.text, ids);
            else
                impl_->bpe->encodeText(piece.text, ids);
        }
    }
    if (addSpecialTokens) ids.insert(ids.end(), impl_->post.suffix.begin(), impl_->post.suffix.end());
    return ids;
}

// As `tokenizers` decodes: each id's token string (added tokens' content included, special ones left
// out when asked), then the decoder over the whole list.
std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skipSpecialTokens) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int64_t id : ids) {
        if (id < 0 || id >= vocabSize())
            throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocabSize()) + ")");
        const std::string& token = impl_->idToToken[id];
        if (skipSpecialTokens && impl_->specialIds.count(id)) continue;
        tokens.push_back(token);
    }
    return sanitizeUtf8(impl_->decoder.decode(std::move(tokens)));
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
