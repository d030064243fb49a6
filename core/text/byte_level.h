// SPDX-License-Identifier: MIT
#pragma once
// GPT-2's byte-level alphabet: every byte 0..255 gets a printable Unicode character, so any byte
// string becomes a string of "visible" characters that BPE can merge. Printable Latin-1 bytes map
// to themselves; the rest (control chars, space, ...) map to U+0100 upwards in byte order, which is
// why a space shows up as 'Ġ' (U+0120) in Qwen and Llama 3 vocabularies.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

// byte -> the UTF-8 encoding of its byte-level character
const std::array<std::string, 256>& byteLevelAlphabet();
// The byte-level string of raw bytes (each byte replaced by its character).
std::string toByteLevel(const std::string& bytes);
// Inverse of toByteLevel. Returns false if `text` holds a character outside the alphabet.
bool fromByteLevel(const std::string& text, std::string& bytesOut);

// UTF-8 helpers.
void appendUtf8(std::string& out, char32_t codepoint);
// Invalid UTF-8 becomes U+FFFD, one per maximal subpart of an ill-formed sequence (Unicode 3.9):
// what Rust's String::from_utf8_lossy (so Hugging Face tokenizers) and Python's errors="replace" give.
std::vector<char32_t> decodeUtf8(const std::string& text);
std::string sanitizeUtf8(const std::string& bytes);

}  // namespace kvscope
