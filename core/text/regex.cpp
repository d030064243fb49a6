// SPDX-License-Identifier: MIT
#include "core/text/regex.h"

#include "core/util/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace kvscope {

struct Regex::Code {
    pcre2_code* code = nullptr;
    ~Code() {
        if (code) pcre2_code_free(code);
    }
};

Regex::Regex(const std::string& pattern, bool literal) : code_(std::make_unique<Code>()) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    code_->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
    if (!code_->code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        throw FormatError("pre-tokenizer regex '" + pattern + "' does not compile at offset " + std::to_string(offset) +
                          ": " + reinterpret_cast<char*>(message));
    }
    pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back silently
}

Regex::~Regex() = default;

std::vector<std::string> Regex::split(const std::string& text, bool removeMatches) const {
    std::vector<std::string> pieces;
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_->code, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t gapStart = 0, at = 0;
    while (at <= text.size()) {
        const int rc = pcre2_match(code_->code, subject, text.size(), at, 0, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            pcre2_match_data_free(match);
            throw UsageError("input text is not valid UTF-8 (regex error " + std::to_string(rc) + ")");
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const std::size_t begin = ov[0], end = ov[1];
        if (end == begin) {  // empty match: step over one whole UTF-8 character
            at = begin + 1;
            while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
            continue;
        }
        if (begin > gapStart) pieces.push_back(text.substr(gapStart, begin - gapStart));
        if (!removeMatches) pieces.push_back(text.substr(begin, end - begin));
        gapStart = at = end;
    }
    pcre2_match_data_free(match);
    if (gapStart < text.size()) pieces.push_back(text.substr(gapStart));
    return pieces;
}

}  // namespace kvscope
