// SPDX-License-Identifier: MIT
#include "core/util/parse.h"

#include <cctype>
#include <stdexcept>

namespace kvscope {

std::optional<int64_t> parseNonNegativeInt(const std::string& text) {
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
    std::size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(text, &used);
    } catch (const std::exception&) {  // out of range
        return std::nullopt;
    }
    if (used != text.size()) return std::nullopt;
    return value;
}

}  // namespace kvscope
