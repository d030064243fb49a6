#pragma once
// Writes JSON the way Hugging Face folders hold it (2-space indent, trailing newline); FormatError
// naming the file if it cannot be opened or written.
#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace kvscope {

inline void writeJsonFile(const std::string& path, const nlohmann::json& j) {
    std::ofstream out(path);
    if (!out) throw FormatError(path + ": cannot open for writing");
    out << j.dump(2) << '\n';
    if (!out.flush()) throw FormatError(path + ": write failed");
}

}  // namespace kvscope
