// SPDX-License-Identifier: MIT
#pragma once
// Hugging Face `tokenizer.json` with a BPE model, as the `tokenizers` library encodes and decodes it:
// byte-level BPE (Qwen2 / Qwen2.5 / Qwen3, Llama 3, SmolLM2, GPT-2) and SentencePiece-style BPE with
// byte fallback (Llama 2, TinyLlama, Mistral v0.1).
//
// encode(text): split out added/special tokens -> normalizer -> pre-tokenizer -> BPE per word (see
// bpe.h: characters outside the vocabulary fall back to bytes, the unknown token, or are dropped as
// `tokenizers` drops them) -> post-processor. decode(ids): every id's token string, added tokens
// included, through the decoder (tokenizer_steps.h). Every component the file declares is either
// implemented or rejected with a FormatError naming it; nothing is silently skipped.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct AddedToken {
    int64_t id = 0;
    std::string content;
    bool special = false;
    bool normalized = false;  // matched on normalized text instead of raw text
    bool lstrip = false;      // swallow whitespace to the left
    bool rstrip = false;      // swallow whitespace to the right
};

class Tokenizer {
public:
    static Tokenizer fromFile(const std::string& path);                 // a tokenizer.json
    static Tokenizer fromJson(const std::string& json, const std::string& source);
    static Tokenizer fromModelDir(const std::string& dir);  // DIR/tokenizer.json, or FILE.gguf's metadata

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // addSpecialTokens applies the post-processor (e.g. Llama 3's BOS), as HF's encode() does.
    std::vector<int64_t> encode(const std::string& text, bool addSpecialTokens = true) const;
    std::string decode(const std::vector<int64_t>& ids, bool skipSpecialTokens = false) const;

    int64_t vocabSize() const;  // largest id + 1, added tokens included
    std::optional<int64_t> tokenToId(const std::string& token) const;
    std::string idToToken(int64_t id) const;  // the raw vocabulary string ("" if none)
    const std::vector<AddedToken>& addedTokens() const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Parses "1,2,3" (spaces allowed) into ids; throws UsageError naming `source` (the flag or field the
// text came from) and the bad element.
std::vector<int64_t> parseIdList(const std::string& text, const std::string& source = "id list");

}  // namespace kvscope
