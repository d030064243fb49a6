// SPDX-License-Identifier: MIT
#pragma once
// A compiled PCRE2 pattern in Unicode mode (UTF + UCP, so \s \p{L} \p{N} mean what HF's Oniguruma
// patterns mean), JIT-compiled when available. PCRE2 rather than std::regex everywhere: libstdc++'s
// matcher recurses once per repeated character and overflows the stack on long texts.
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

// What a pattern is for: named in its errors, and an answer pattern must cope with model output
// that is not valid UTF-8 (a byte-level token can end mid-character), where a tokenizer's refuses it.
enum class RegexRole { PreTokenizer, Answer };

class Regex {
public:
    // Throws FormatError naming the role, the pattern and where it fails to compile.
    Regex(const std::string& pattern, bool literal, RegexRole role = RegexRole::PreTokenizer);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Splits `text` into the matches and the gaps between them, in order ("Isolated"); with
    // removeMatches the matches are dropped ("Removed"). Empty pieces are never produced. `offsets`,
    // when given, receives each piece's byte offset in `text`.
    std::vector<std::string> split(const std::string& text, bool removeMatches,
                                   std::vector<std::size_t>* offsets = nullptr) const;

    // `text` with every non-overlapping non-empty match replaced by `with` (no group references).
    std::string replaceAll(const std::string& text, const std::string& with) const;

    // The last non-overlapping match in `text`: its first capture group if the pattern has one,
    // else the whole match. Throws FormatError if PCRE2 gives up (its match or depth limit).
    std::optional<std::string> lastMatch(const std::string& text) const;

private:
    struct Code;
    std::unique_ptr<Code> code_;
    std::string description_;  // "answer regex '...'", for errors
};

}  // namespace kvscope
