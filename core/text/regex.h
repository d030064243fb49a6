// SPDX-License-Identifier: MIT
#pragma once
// A compiled PCRE2 pattern in Unicode mode (UTF + UCP, so \s \p{L} \p{N} mean what HF's Oniguruma
// patterns mean), JIT-compiled when available.
#include <memory>
#include <string>
#include <vector>

namespace kvscope {

class Regex {
public:
    Regex(const std::string& pattern, bool literal);  // throws FormatError naming the pattern
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Splits `text` into the matches and the gaps between them, in order ("Isolated"); with
    // removeMatches the matches are dropped ("Removed"). Empty pieces are never produced.
    std::vector<std::string> split(const std::string& text, bool removeMatches) const;

private:
    struct Code;
    std::unique_ptr<Code> code_;
};

}  // namespace kvscope
