// SPDX-License-Identifier: MIT
#pragma once
// Token ids read from JSON (dataset prefix_ids, cache metadata, tokenizer.json, --jsonl input). A
// JSON number is not necessarily an integer: nlohmann's get<int64_t>() casts 1.5 to 1 and 3e19 to
// undefined behaviour. These accept exactly integers in [0, limits::kMaxVocabulary) and otherwise
// throw FormatError starting with `what` (the file and field).
#include "core/util/error.h"
#include "core/util/limits.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope {

inline int64_t tokenIdFromJson(const nlohmann::json& v, const std::string& what) {
    const bool inRange =
        v.is_number_unsigned()
            ? v.get<std::uint64_t>() < static_cast<std::uint64_t>(limits::kMaxVocabulary)
            : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < limits::kMaxVocabulary;
    if (!inRange)
        throw FormatError(what + ": expected a token id (an integer from 0 to " +
                          std::to_string(limits::kMaxVocabulary - 1) + "), got " + v.dump().substr(0, 40));
    return v.get<int64_t>();
}

inline std::vector<int64_t> tokenIdsFromJson(const nlohmann::json& list, const std::string& what) {
    if (!list.is_array()) throw FormatError(what + ": expected a list of token ids, got " + list.dump().substr(0, 40));
    std::vector<int64_t> ids;
    ids.reserve(list.size());
    for (const auto& v : list) ids.push_back(tokenIdFromJson(v, what));
    return ids;
}

}  // namespace kvscope
