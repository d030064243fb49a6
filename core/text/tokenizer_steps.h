// SPDX-License-Identifier: MIT
#pragma once
// The steps of a Hugging Face tokenizer.json around its model, each as the `tokenizers` library
// implements it: the normalizer (text -> text), the pre-tokenizer (text -> the words the model
// tokenizes one by one) and the decoder (token strings -> text). The families kvscope reads use two
// shapes of them:
//   byte-level BPE (Qwen, Llama 3, SmolLM2, GPT-2): no normalizer or NFC; Split / Digits + ByteLevel;
//     the ByteLevel decoder;
//   SentencePiece BPE (Llama 2, TinyLlama, Mistral v0.1): Prepend("▁") + Replace(" ", "▁") or a
//     Metaspace pre-tokenizer; Replace / ByteFallback / Fuse / Strip or Metaspace decoders.
// A type or an option outside these is a FormatError naming it, never skipped.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace kvscope {

class Regex;

// Rust's char::is_whitespace (the White_Space property), which `tokenizers` strips with.
bool isUnicodeWhitespace(char32_t c);
// The byte length of each UTF-8 character of `text`, in order (an invalid byte counts alone).
std::vector<std::size_t> utf8CharLengths(const std::string& text);

class Normalizer {
public:
    static Normalizer fromJson(const nlohmann::json& j, const std::string& source);  // null: none
    std::string apply(std::string text) const;

private:
    struct Step;
    std::vector<std::shared_ptr<const Step>> steps_;
};

// A word between pre-tokenizer steps. atInputStart: it begins at offset 0 of the text encode() was
// given (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
    std::string text;
    bool atInputStart = false;
};

class PreTokenizer {
public:
    static PreTokenizer fromJson(const nlohmann::json& j, const std::string& source);  // null: none
    std::vector<Piece> apply(std::vector<Piece> pieces) const;
    // Ends with ByteLevel: each word's bytes are then mapped onto the byte-level alphabet, one
    // character a byte, before the model sees them.
    bool byteLevel() const { return byteLevel_; }

private:
    struct Step;
    std::vector<std::shared_ptr<const Step>> steps_;
    bool byteLevel_ = false;
};

class Decoder {
public:
    static Decoder fromJson(const nlohmann::json& j, const std::string& source);  // null: tokens joined by " "
    std::string decode(std::vector<std::string> tokens) const;

private:
    struct Step;
    std::vector<std::shared_ptr<const Step>> steps_;
    bool none_ = true;
};

}  // namespace kvscope
