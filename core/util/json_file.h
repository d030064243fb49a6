// SPDX-License-Identifier: MIT
#pragma once
// Writes JSON the way Hugging Face folders hold it (2-space indent, trailing newline), atomically;
// FormatError naming the file if it cannot be written.
#include "core/util/atomic_file.h"

#include <nlohmann/json.hpp>

#include <string>

namespace kvscope {

inline void writeJsonFile(const std::string& path, const nlohmann::json& j) {
    writeTextFileAtomically(path, j.dump(2) + "\n");
}

}  // namespace kvscope
