// SPDX-License-Identifier: MIT
#include "core/text/byte_level.h"

#include <unordered_map>

namespace kvscope {

void appendUtf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out += static_cast<char>(c);
    } else if (c < 0x800) {
        out += static_cast<char>(0xC0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    }
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], and its code point; 0 if invalid.
std::size_t utf8Sequence(const std::string& s, std::size_t i, char32_t& cp) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    std::size_t len;
    char32_t min;
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    if ((b0 & 0xE0) == 0xC0) {
        len = 2;
        cp = b0 & 0x1F;
        min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        len = 3;
        cp = b0 & 0x0F;
        min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        len = 4;
        cp = b0 & 0x07;
        min = 0x10000;
    } else
        return 0;
    if (i + len > s.size()) return 0;
    for (std::size_t k = 1; k < len; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// Bytes that one U+FFFD replaces where no valid sequence starts at s[i]: the "maximal subpart"
// (Unicode 3.9, U+FFFD substitution) - the longest start of a well-formed sequence, or the byte
// alone when it cannot start one. This is what Rust's String::from_utf8_lossy does, and so what
// Hugging Face tokenizers' decoders give for ids that cut a character apart.
std::size_t maximalSubpart(const std::string& s, std::size_t i) {
    const auto lead = static_cast<unsigned char>(s[i]);
    std::size_t continuations;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the first continuation byte
    if (lead >= 0xC2 && lead <= 0xDF)
        continuations = 1;
    else if (lead >= 0xE0 && lead <= 0xEF)
        continuations = 2, low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4)
        continuations = 3, low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    else
        return 1;
    std::size_t n = 1;
    for (; n <= continuations && i + n < s.size(); ++n) {
        const auto b = static_cast<unsigned char>(s[i + n]);
        if (b < (n == 1 ? low : 0x80) || b > (n == 1 ? high : 0xBF)) break;
    }
    return n;
}

const std::unordered_map<char32_t, unsigned char>& reverseAlphabet() {
    static const auto table = [] {
        std::unordered_map<char32_t, unsigned char> m;
        const auto& alpha = byteLevelAlphabet();
        for (int b = 0; b < 256; ++b) m[decodeUtf8(alpha[b]).front()] = static_cast<unsigned char>(b);
        return m;
    }();
    return table;
}

}  // namespace

const std::array<std::string, 256>& byteLevelAlphabet() {
    static const auto table = [] {
        std::array<std::string, 256> t;
        auto printable = [](int b) {
            return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        char32_t next = 256;
        for (int b = 0; b < 256; ++b) appendUtf8(t[b], printable(b) ? static_cast<char32_t>(b) : next++);
        return t;
    }();
    return table;
}

std::string toByteLevel(const std::string& bytes) {
    const auto& alpha = byteLevelAlphabet();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) out += alpha[b];
    return out;
}

bool fromByteLevel(const std::string& text, std::string& bytesOut) {
    const auto& rev = reverseAlphabet();
    for (char32_t c : decodeUtf8(text)) {
        auto it = rev.find(c);
        if (it == rev.end()) return false;
        bytesOut += static_cast<char>(it->second);
    }
    return true;
}

std::vector<char32_t> decodeUtf8(const std::string& text) {
    std::vector<char32_t> out;
    for (std::size_t i = 0; i < text.size();) {
        char32_t cp = 0;
        const std::size_t len = utf8Sequence(text, i, cp);
        out.push_back(len ? cp : 0xFFFD);
        i += len ? len : maximalSubpart(text, i);
    }
    return out;
}

std::string sanitizeUtf8(const std::string& bytes) {
    std::string out;
    out.reserve(bytes.size());
    for (std::size_t i = 0; i < bytes.size();) {
        char32_t cp = 0;
        const std::size_t len = utf8Sequence(bytes, i, cp);
        if (len)
            out.append(bytes, i, len);
        else
            appendUtf8(out, 0xFFFD);
        i += len ? len : maximalSubpart(bytes, i);
    }
    return out;
}

}  // namespace kvscope
