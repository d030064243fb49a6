// SPDX-License-Identifier: MIT
#include "core/text/tokenizer_steps.h"

#include "core/text/byte_level.h"
#include "core/text/regex.h"
#include "core/util/error.h"

#include <utf8proc.h>

#include <cstdlib>

namespace kvscope {
namespace {

using nlohmann::json;

// The pattern GPT-2's ByteLevel pre-tokenizer uses when use_regex is true.
const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string typeOf(const json& j, const std::string& source, const char* what) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        throw FormatError(source + ": " + what + " must be an object with a string 'type'");
    return j["type"].get<std::string>();
}

// The parts of a Sequence normalizer, pre-tokenizer or decoder: its `key` list.
const json& sequenceParts(const json& j, const char* key, const std::string& source, const char* what) {
    if (!j.contains(key) || !j[key].is_array())
        throw FormatError(source + ": Sequence " + what + " needs a '" + key + "' list");
    return j[key];
}

std::string stringField(const json& j, const char* key, const std::string& source, const std::string& what) {
    if (!j.contains(key) || !j[key].is_string())
        throw FormatError(source + ": " + what + " needs a string '" + key + "'");
    return j[key].get<std::string>();
}

// {"String": "..."} or {"Regex": "..."}, as Split, Replace and their decoders write a pattern.
std::shared_ptr<Regex> patternOf(const json& j, const std::string& source, const std::string& what) {
    const json pattern = j.value("pattern", json());
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!literal && !(pattern.is_object() && pattern.contains("Regex")))
        throw FormatError(source + ": " + what + " pattern must be {\"String\": ...} or {\"Regex\": ...}");
    const json& text = pattern[literal ? "String" : "Regex"];
    if (!text.is_string()) throw FormatError(source + ": " + what + " pattern must be a string");
    try {
        return std::make_shared<Regex>(text.get<std::string>(), literal);
    } catch (const FormatError& e) {
        throw FormatError(source + ": " + e.what());
    }
}

// A one-character string field (Metaspace's replacement, Strip's content).
std::string oneCharacter(const json& j, const char* key, const std::string& source, const std::string& what) {
    const std::string s = stringField(j, key, source, what);
    if (utf8CharLengths(s).size() != 1)
        throw FormatError(source + ": " + what + " '" + key + "' must be one character (is '" + s + "')");
    return s;
}

std::string normalizeUnicode(const std::string& text, int options) {
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

bool startsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Rust's char::is_numeric: the Unicode general categories Nd, Nl and No.
bool isNumeric(const std::string& text, std::size_t at, std::size_t length) {
    utf8proc_int32_t c = 0;
    utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at), static_cast<utf8proc_ssize_t>(length),
                     &c);
    const auto category = utf8proc_category(c);
    return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL || category == UTF8PROC_CATEGORY_NO;
}

}  // namespace

bool isUnicodeWhitespace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<std::size_t> utf8CharLengths(const std::string& text) {
    std::vector<std::size_t> lengths;
    for (std::size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        std::size_t n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        std::size_t valid = 1;
        while (valid < n && i + valid < text.size() && (static_cast<unsigned char>(text[i + valid]) & 0xC0) == 0x80)
            ++valid;
        lengths.push_back(valid == n ? n : 1);
        i += lengths.back();
    }
    return lengths;
}

// ---- normalizer -------------------------------------------------------------------------------

struct Normalizer::Step {
    enum class Kind { Unicode, Prepend, Replace } kind = Kind::Unicode;
    int unicodeOptions = 0;
    std::string text;                // Prepend: what is put in front; Replace: the replacement
    std::shared_ptr<Regex> pattern;  // Replace

    std::string apply(std::string t) const {
        switch (kind) {
        case Kind::Unicode: return normalizeUnicode(t, unicodeOptions);
        case Kind::Prepend: return t.empty() ? t : text + t;  // tokenizers leaves an empty text empty
        case Kind::Replace: return pattern->replaceAll(t, text);
        }
        return t;
    }
};

Normalizer Normalizer::fromJson(const json& j, const std::string& source) {
    Normalizer n;
    if (j.is_null()) return n;
    const std::string type = typeOf(j, source, "normalizer");
    if (type == "Sequence") {
        for (const auto& inner : sequenceParts(j, "normalizers", source, "normalizer")) {
            const Normalizer part = fromJson(inner, source);
            n.steps_.insert(n.steps_.end(), part.steps_.begin(), part.steps_.end());
        }
        return n;
    }
    auto step = std::make_shared<Step>();
    const int stable = UTF8PROC_STABLE;
    if (type == "NFC")
        step->unicodeOptions = stable | UTF8PROC_COMPOSE;
    else if (type == "NFD")
        step->unicodeOptions = stable | UTF8PROC_DECOMPOSE;
    else if (type == "NFKC")
        step->unicodeOptions = stable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (type == "NFKD")
        step->unicodeOptions = stable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else if (type == "Prepend") {
        step->kind = Step::Kind::Prepend;
        step->text = stringField(j, "prepend", source, "Prepend normalizer");
    } else if (type == "Replace") {
        step->kind = Step::Kind::Replace;
        step->pattern = patternOf(j, source, "Replace normalizer");
        step->text = stringField(j, "content", source, "Replace normalizer");
    } else {
        throw FormatError(source + ": normalizer type '" + type +
                          "' is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)");
    }
    n.steps_.push_back(std::move(step));
    return n;
}

std::string Normalizer::apply(std::string text) const {
    for (const auto& step : steps_) text = step->apply(std::move(text));
    return text;
}

// ---- pre-tokenizer ------------------------------------------------------------------------------

struct PreTokenizer::Step {
    enum class Kind { Split, ByteLevel, Metaspace, Digits } kind = Kind::Split;
    std::shared_ptr<Regex> regex;  // Split; ByteLevel with use_regex (GPT-2's pattern)
    bool removeMatches = false;    // Split: behavior "Removed" (else "Isolated")
    bool addPrefixSpace = false;   // ByteLevel
    std::string replacement;       // Metaspace, one character
    enum class Prepend { Always, First, Never } prepend = Prepend::Always;
    bool splitOnReplacement = false;  // Metaspace
    bool individualDigits = false;    // Digits

    void apply(const Piece& in, std::vector<Piece>& out) const {
        switch (kind) {
        case Kind::Split: splitByRegex(in.text, in.atInputStart, out); return;
        case Kind::ByteLevel: {
            // tokenizers adds the prefix space once a word reaching this step, before its regex.
            std::string text = in.text;
            if (addPrefixSpace && !startsWith(text, " ")) text.insert(text.begin(), ' ');
            if (regex)
                splitByRegex(text, in.atInputStart, out);
            else
                out.push_back({text, in.atInputStart});
            return;
        }
        case Kind::Metaspace: metaspace(in, out); return;
        case Kind::Digits: digits(in, out); return;
        }
    }

    void splitByRegex(const std::string& text, bool atInputStart, std::vector<Piece>& out) const {
        std::vector<std::size_t> offsets;
        const auto parts = regex->split(text, removeMatches, &offsets);
        for (std::size_t i = 0; i < parts.size(); ++i) out.push_back({parts[i], atInputStart && offsets[i] == 0});
    }

    void metaspace(const Piece& in, std::vector<Piece>& out) const {
        std::string text;
        for (char c : in.text) c == ' ' ? text += replacement : text += c;
        const bool prependHere = prepend == Prepend::Always || (prepend == Prepend::First && in.atInputStart);
        if (prependHere && !startsWith(text, replacement)) text = replacement + text;
        if (!splitOnReplacement) {
            out.push_back({text, in.atInputStart});
            return;
        }
        // "MergedWithNext": each replacement character begins a new word.
        std::size_t start = 0;
        for (std::size_t at = text.find(replacement, 1); at != std::string::npos;
             at = text.find(replacement, at + replacement.size())) {
            out.push_back({text.substr(start, at - start), in.atInputStart && start == 0});
            start = at;
        }
        if (start < text.size()) out.push_back({text.substr(start), in.atInputStart && start == 0});
    }

    void digits(const Piece& in, std::vector<Piece>& out) const {
        std::size_t start = 0, at = 0;
        bool inDigits = false;
        auto cut = [&](std::size_t end) {
            if (end > start) out.push_back({in.text.substr(start, end - start), in.atInputStart && start == 0});
            start = end;
        };
        for (std::size_t length : utf8CharLengths(in.text)) {
            const bool digit = isNumeric(in.text, at, length);
            if (digit != inDigits || (digit && individualDigits)) cut(at);
            inDigits = digit;
            at += length;
        }
        cut(at);
    }
};

PreTokenizer PreTokenizer::fromJson(const json& j, const std::string& source) {
    PreTokenizer p;
    if (j.is_null()) return p;
    const std::string type = typeOf(j, source, "pre_tokenizer");
    if (type == "Sequence") {
        for (const auto& inner : sequenceParts(j, "pretokenizers", source, "pre_tokenizer")) {
            if (p.byteLevel_) throw FormatError(source + ": a pre_tokenizer after ByteLevel is not supported");
            const PreTokenizer part = fromJson(inner, source);
            p.steps_.insert(p.steps_.end(), part.steps_.begin(), part.steps_.end());
            p.byteLevel_ = part.byteLevel_;
        }
        return p;
    }
    auto step = std::make_shared<Step>();
    if (type == "Split") {
        if (j.value("invert", false))
            throw FormatError(source + ": Split pre_tokenizer with invert=true is not supported");
        const std::string behavior = j.value("behavior", "Isolated");
        if (behavior != "Isolated" && behavior != "Removed")
            throw FormatError(source + ": Split behavior '" + behavior + "' is not supported (Isolated, Removed)");
        step->regex = patternOf(j, source, "Split pre_tokenizer");
        step->removeMatches = behavior == "Removed";
    } else if (type == "ByteLevel") {
        step->kind = Step::Kind::ByteLevel;
        step->addPrefixSpace = j.value("add_prefix_space", false);
        if (j.value("use_regex", true)) step->regex = std::make_shared<Regex>(kGpt2Pattern, false);
        p.byteLevel_ = true;
    } else if (type == "Metaspace") {
        step->kind = Step::Kind::Metaspace;
        step->replacement = oneCharacter(j, "replacement", source, "Metaspace pre_tokenizer");
        step->splitOnReplacement = j.value("split", true);
        // Files written before prepend_scheme existed say add_prefix_space (true: "always").
        const std::string scheme = j.contains("prepend_scheme")
                                       ? stringField(j, "prepend_scheme", source, "Metaspace pre_tokenizer")
                                       : (j.value("add_prefix_space", true) ? "always" : "never");
        if (scheme == "always")
            step->prepend = Step::Prepend::Always;
        else if (scheme == "first")
            step->prepend = Step::Prepend::First;
        else if (scheme == "never")
            step->prepend = Step::Prepend::Never;
        else
            throw FormatError(source + ": Metaspace prepend_scheme '" + scheme +
                              "' is not one of always, first, never");
    } else if (type == "Digits") {
        step->kind = Step::Kind::Digits;
        step->individualDigits = j.value("individual_digits", false);
    } else {
        throw FormatError(source + ": pre_tokenizer type '" + type +
                          "' is not supported (supported: Split, ByteLevel, Metaspace, Digits, Sequence)");
    }
    p.steps_.push_back(std::move(step));
    return p;
}

std::vector<Piece> PreTokenizer::apply(std::vector<Piece> pieces) const {
    for (const auto& step : steps_) {
        std::vector<Piece> next;
        next.reserve(pieces.size());
        for (const auto& piece : pieces) step->apply(piece, next);
        pieces = std::move(next);
    }
    return pieces;
}

// ---- decoder ------------------------------------------------------------------------------------

struct Decoder::Step {
    enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind = Kind::ByteLevel;
    std::shared_ptr<Regex> pattern;  // Replace
    std::string content;             // Replace: the replacement; Strip: the character; Metaspace: replacement
    std::size_t start = 0, stop = 0;  // Strip: at most this many characters off each end
    bool dropFirstReplacement = false;  // Metaspace with a prepend_scheme other than "never"

    std::vector<std::string> apply(std::vector<std::string> tokens) const {
        switch (kind) {
        case Kind::ByteLevel: return {byteLevel(tokens)};
        case Kind::ByteFallback: return byteFallback(tokens);
        case Kind::Fuse: {
            std::string all;
            for (const auto& t : tokens) all += t;
            return {all};
        }
        case Kind::Replace:
            for (auto& t : tokens) t = pattern->replaceAll(t, content);
            return tokens;
        case Kind::Strip:
            for (auto& t : tokens) t = strip(t);
            return tokens;
        case Kind::Metaspace:
            for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = metaspace(tokens[i], i == 0);
            return tokens;
        }
        return tokens;
    }

    // Characters of the byte-level alphabet become their bytes; a token holding any other character
    // is taken as it is. The bytes of all tokens together are one UTF-8 text, invalid parts U+FFFD.
    static std::string byteLevel(const std::vector<std::string>& tokens) {
        std::string bytes;
        for (const auto& t : tokens) {
            std::string raw;
            bytes += fromByteLevel(t, raw) ? raw : t;
        }
        return sanitizeUtf8(bytes);
    }

    // Runs of <0xNN> tokens become the text their bytes spell, or one U+FFFD a byte when they do
    // not spell valid UTF-8.
    static std::vector<std::string> byteFallback(const std::vector<std::string>& tokens) {
        std::vector<std::string> out;
        std::string run;
        auto flush = [&] {
            if (run.empty()) return;
            if (sanitizeUtf8(run) == run)
                out.push_back(run);
            else
                for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
            run.clear();
        };
        for (const auto& t : tokens) {
            int value = -1;
            if (t.size() == 6 && startsWith(t, "<0x") && t[5] == '>' &&
                std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4])))
                value = std::stoi(t.substr(3, 2), nullptr, 16);
            if (value >= 0) {
                run += static_cast<char>(value);
                continue;
            }
            flush();
            out.push_back(t);
        }
        flush();
        return out;
    }

    std::string strip(const std::string& t) const {
        const auto lengths = utf8CharLengths(t);
        std::size_t from = 0, fromChars = 0;
        while (fromChars < start && fromChars < lengths.size() && t.compare(from, content.size(), content) == 0 &&
               lengths[fromChars] == content.size())
            from += lengths[fromChars++];
        std::size_t to = t.size(), toChars = 0;
        while (toChars < stop && lengths.size() > fromChars + toChars && to >= from + content.size() &&
               t.compare(to - content.size(), content.size(), content) == 0 &&
               lengths[lengths.size() - 1 - toChars] == content.size())
            to -= content.size(), ++toChars;
        return t.substr(from, to - from);
    }

    // Each replacement character becomes a space, except in the first token, where all of them go.
    std::string metaspace(const std::string& t, bool first) const {
        std::string out;
        for (std::size_t at = 0; at < t.size();) {
            if (t.compare(at, content.size(), content) == 0) {
                if (!(first && dropFirstReplacement)) out += ' ';
                at += content.size();
            } else {
                out += t[at++];
            }
        }
        return out;
    }
};

Decoder Decoder::fromJson(const json& j, const std::string& source) {
    Decoder d;
    if (j.is_null()) return d;
    d.none_ = false;
    const std::string type = typeOf(j, source, "decoder");
    if (type == "Sequence") {
        for (const auto& inner : sequenceParts(j, "decoders", source, "decoder")) {
            const Decoder part = fromJson(inner, source);
            d.steps_.insert(d.steps_.end(), part.steps_.begin(), part.steps_.end());
        }
        return d;
    }
    auto step = std::make_shared<Step>();
    if (type == "ByteLevel") {
        step->kind = Step::Kind::ByteLevel;
    } else if (type == "ByteFallback") {
        step->kind = Step::Kind::ByteFallback;
    } else if (type == "Fuse") {
        step->kind = Step::Kind::Fuse;
    } else if (type == "Replace") {
        step->kind = Step::Kind::Replace;
        step->pattern = patternOf(j, source, "Replace decoder");
        step->content = stringField(j, "content", source, "Replace decoder");
    } else if (type == "Strip") {
        step->kind = Step::Kind::Strip;
        step->content = oneCharacter(j, "content", source, "Strip decoder");
        for (const char* key : {"start", "stop"})
            if (!j.contains(key) || !j[key].is_number_unsigned())
                throw FormatError(source + ": Strip decoder needs a non-negative integer '" + key + "'");
        step->start = j["start"].get<std::size_t>();
        step->stop = j["stop"].get<std::size_t>();
    } else if (type == "Metaspace") {
        step->kind = Step::Kind::Metaspace;
        step->content = oneCharacter(j, "replacement", source, "Metaspace decoder");
        const std::string scheme = j.contains("prepend_scheme")
                                       ? j["prepend_scheme"].get<std::string>()
                                       : (j.value("add_prefix_space", true) ? "always" : "never");
        step->dropFirstReplacement = scheme != "never";
    } else {
        throw FormatError(source + ": decoder type '" + type +
                          "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace, "
                          "Sequence)");
    }
    d.steps_.push_back(std::move(step));
    return d;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
    std::string text;
    if (none_) {  // tokenizers joins the token strings with spaces when no decoder is declared
        for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
        return text;
    }
    for (const auto& step : steps_) tokens = step->apply(std::move(tokens));
    for (const auto& t : tokens) text += t;
    return text;
}

}  // namespace kvscope
