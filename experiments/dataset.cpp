// SPDX-License-Identifier: MIT
#include "experiments/dataset.h"
#include "core/util/json_ids.h"

#include "core/text/regex.h"
#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <cctype>
#include <set>

namespace kvscope::experiments {

std::vector<DatasetItem> loadDataset(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw FormatError(path + ": cannot open dataset");
    std::vector<DatasetItem> items;
    std::set<std::string> seen;
    std::string line;
    for (int lineNo = 1; std::getline(in, line); ++lineNo) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = path + ":" + std::to_string(lineNo);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception&) {
            throw FormatError(where + ": not a JSON object");
        }
        DatasetItem item;
        item.line = lineNo;
        try {
            if (!j.contains("id")) throw FormatError(where + ": field 'id' is missing");
            item.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
            if (j.contains("prompt")) item.prompt = j["prompt"].get<std::string>();
            if (j.contains("messages"))
                for (const auto& m : j["messages"])
                    item.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
            if (j.contains("prefix_ids"))
                item.prefixIds = tokenIdsFromJson(j["prefix_ids"], where + ": field 'prefix_ids'");
            if (!j.contains("answer")) throw FormatError(where + ": field 'answer' is missing");
            item.answer = j["answer"].is_string() ? j["answer"].get<std::string>() : j["answer"].dump();
        } catch (const nlohmann::json::exception& e) {
            throw FormatError(where + ": a field has the wrong type (" + e.what() + ")");
        }
        if (item.prompt.empty() && item.messages.empty() && item.prefixIds.empty())
            throw FormatError(where + ": needs 'prompt', 'messages' or 'prefix_ids'");
        if (!seen.insert(item.id).second) throw FormatError(where + ": duplicate id '" + item.id + "'");
        items.push_back(std::move(item));
    }
    if (items.empty()) throw FormatError(path + ": dataset has no items");
    return items;
}

namespace {

// The last match of -?\d+(?:\.\d+)?, scanned by hand: libstdc++'s std::regex recurses once per
// repeated character and overflowed the stack on a 100 KB run of digits (found by fuzz_dataset_jsonl).
std::optional<std::string> lastNumber(const std::string& text) {
    auto digit = [&](std::size_t i) { return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); };
    std::optional<std::string> last;
    for (std::size_t i = 0; i < text.size();) {
        if (!digit(i) && !(text[i] == '-' && digit(i + 1))) {
            ++i;
            continue;
        }
        const std::size_t start = i;
        if (text[i] == '-') ++i;
        while (digit(i)) ++i;
        if (i < text.size() && text[i] == '.' && digit(i + 1)) {
            ++i;
            while (digit(i)) ++i;
        }
        last = text.substr(start, i - start);
    }
    return last;
}

}  // namespace

std::string choiceName(AnswerExtraction method) {
    switch (method) {
    case AnswerExtraction::LastNumber: return "last_number";
    case AnswerExtraction::Regex: return "regex";
    case AnswerExtraction::Boxed: return "boxed";
    }
    return "?";
}

std::optional<std::string> extractAnswer(const std::string& text, AnswerExtraction method, const std::string& pattern) {
    if (method == AnswerExtraction::LastNumber) return lastNumber(text);
    if (method == AnswerExtraction::Boxed) {
        const auto at = text.rfind("\\boxed{");
        if (at == std::string::npos) return std::nullopt;
        int depth = 1;
        for (std::size_t i = at + 7; i < text.size(); ++i) {
            if (text[i] == '{') ++depth;
            if (text[i] == '}' && --depth == 0) return text.substr(at + 7, i - at - 7);
        }
        return std::nullopt;
    }
    return Regex(pattern, false, RegexRole::Answer).lastMatch(text);
}

bool answersMatch(const std::string& extracted, const std::string& gold) {
    auto trim = [](std::string s) {
        s.erase(0, s.find_first_not_of(" \t\n\""));
        s.erase(s.find_last_not_of(" \t\n\"") + 1);
        return s;
    };
    const std::string a = trim(extracted), b = trim(gold);
    try {
        std::size_t ua = 0, ub = 0;
        const double x = std::stod(a, &ua), y = std::stod(b, &ub);
        if (ua == a.size() && ub == b.size()) return x == y;
    } catch (const std::exception&) {}
    return a == b;
}

}  // namespace kvscope::experiments
