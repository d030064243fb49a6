// SPDX-License-Identifier: MIT
#pragma once
// Dataset items (JSONL, one object per line): "id", "prompt" or "messages" ([{role, content}]),
// "answer"; optional "prefix_ids" (integer ids used as the prompt, bypassing the tokenizer).
#include "core/text/chat_template.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::experiments {

struct DatasetItem {
    std::string id;
    std::string prompt;                  // used when messages is empty
    std::vector<ChatMessage> messages;
    std::string answer;
    std::vector<int64_t> prefixIds;      // non-empty: the prompt as ids
    int64_t line = 0;                    // where the file has it, for errors found later (1-based)
};

// Throws FormatError naming the file, line and field. Ids must be unique.
std::vector<DatasetItem> loadDataset(const std::string& path);

// Answer extraction: LastNumber (last integer or decimal in the text), Boxed (content of the last
// \boxed{...}, braces balanced), Regex (first capture group of the last match, or the match).
enum class AnswerExtraction { LastNumber, Regex, Boxed };
std::string choiceName(AnswerExtraction method);  // "last_number" | "regex" | "boxed", as files spell it
std::optional<std::string> extractAnswer(const std::string& text, AnswerExtraction method,
                                         const std::string& regex = "");
// Numbers compare numerically ("47" == "47.0"), everything else as trimmed strings.
bool answersMatch(const std::string& extracted, const std::string& gold);

}  // namespace kvscope::experiments
