// SPDX-License-Identifier: MIT
#pragma once
// The tokenizer and chat template of a llama.cpp GGUF file, as transformers builds them from its
// tokenizer.* metadata (integrations/gguf/gguf_tokenizer_mapping.py): a tokenizer.json for
// Tokenizer::fromJson, and the template with the special tokens it is rendered with.
#include "core/model/gguf.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvscope {

// The tokenizer.json that transformers builds from the file's tokenizer.ggml.* metadata (gpt2:
// byte-level BPE; llama: sentencepiece BPE with byte fallback), its special tokens and chat template.
nlohmann::json ggufTokenizerJson(const GgufFile& file);
struct GgufChatTemplate {
    std::string text;                // tokenizer.chat_template, empty where the file has none
    nlohmann::ordered_json specialTokens = nlohmann::ordered_json::object();  // bos_token, ... as strings
};
GgufChatTemplate ggufChatTemplate(const GgufFile& file);

}  // namespace kvscope
