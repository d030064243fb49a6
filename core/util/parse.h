// SPDX-License-Identifier: MIT
#pragma once
// Strict number parsing for command-line values and file metadata: the whole text must be a
// non-negative decimal integer ("12"; not "12x", "-1", " 3" or ""). Callers wrap the failure in
// the error type that names their file or flag.
#include <cstdint>
#include <optional>
#include <string>

namespace kvscope {

std::optional<int64_t> parseNonNegativeInt(const std::string& text);

}  // namespace kvscope
