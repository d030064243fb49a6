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

namespace {

std::string pcre2Message(int error) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return reinterpret_cast<char*>(message);
}

bool isUtf8Error(int rc) { return rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21; }

// Calls visit(begin, end, ovector, captures) for each non-overlapping non-empty match, left to right.
// An empty match advances by one whole UTF-8 character, as HF's splitters do. In UTF mode PCRE2
// checks the whole subject on every call: only the first call checks, or a long text with many
// matches (a SentencePiece text is one word) would take time quadratic in its length.
template <typename Visit>
void visitMatches(const pcre2_code* code, const std::string& text, const std::string& description, Visit visit) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t at = 0;
    uint32_t check = 0;
    while (at <= text.size()) {
        const int rc = pcre2_match(code, subject, text.size(), at, check, match, nullptr);
        check = PCRE2_NO_UTF_CHECK;  // the subject is valid UTF-8 if that call did not refuse it
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            pcre2_match_data_free(match);
            if (isUtf8Error(rc)) throw UsageError("input text is not valid UTF-8 (" + pcre2Message(rc) + ")");
            throw FormatError(description + " gave up on a text of " + std::to_string(text.size()) +
                              " bytes: " + pcre2Message(rc));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
        const std::size_t begin = ov[0], end = ov[1];
        if (end == begin) {
            at = begin + 1;
            while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
            continue;
        }
        visit(begin, end, ov, rc);
        at = end;
    }
    pcre2_match_data_free(match);
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, RegexRole role)
    : code_(std::make_unique<Code>()),
      description_((role == RegexRole::Answer ? "answer regex '" : "pre-tokenizer regex '") + pattern + "'") {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2 refuses UCP beside LITERAL, and a literal string has no classes for UCP to widen.
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    if (role == RegexRole::Answer) options |= PCRE2_MATCH_INVALID_UTF;
    code_->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
    if (!code_->code)
        throw FormatError(description_ + " does not compile at offset " + std::to_string(offset) + ": " +
                          pcre2Message(error));
    pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back silently
}

Regex::~Regex() = default;

std::vector<std::string> Regex::split(const std::string& text, bool removeMatches,
                                      std::vector<std::size_t>* offsets) const {
    std::vector<std::string> pieces;
    auto add = [&](std::size_t begin, std::size_t end) {
        pieces.push_back(text.substr(begin, end - begin));
        if (offsets) offsets->push_back(begin);
    };
    std::size_t gapStart = 0;
    visitMatches(code_->code, text, description_, [&](std::size_t begin, std::size_t end, const PCRE2_SIZE*, int) {
        if (begin > gapStart) add(gapStart, begin);
        if (!removeMatches) add(begin, end);
        gapStart = end;
    });
    if (gapStart < text.size()) add(gapStart, text.size());
    return pieces;
}

std::string Regex::replaceAll(const std::string& text, const std::string& with) const {
    std::string out;
    std::size_t gapStart = 0;
    visitMatches(code_->code, text, description_, [&](std::size_t begin, std::size_t end, const PCRE2_SIZE*, int) {
        out.append(text, gapStart, begin - gapStart).append(with);
        gapStart = end;
    });
    return out.append(text, gapStart, std::string::npos);
}

std::optional<std::string> Regex::lastMatch(const std::string& text) const {
    uint32_t groups = 0;
    pcre2_pattern_info(code_->code, PCRE2_INFO_CAPTURECOUNT, &groups);
    std::optional<std::string> last;
    visitMatches(code_->code, text, description_,
                 [&](std::size_t begin, std::size_t end, const PCRE2_SIZE* ov, int set) {
                     if (groups == 0)
                         last = text.substr(begin, end - begin);
                     else if (set > 1 && ov[2] != PCRE2_UNSET)
                         last = text.substr(ov[2], ov[3] - ov[2]);
                     else
                         last = std::string();  // group 1 took no part in this match
                 });
    return last;
}

}  // namespace kvscope
