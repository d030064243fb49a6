// SPDX-License-Identifier: MIT
#include "core/util/file_names.h"

#include "core/util/error.h"
#include "core/util/hash.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kvscope {
namespace {

bool isPortable(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
}

}  // namespace

std::string fileNameComponent(const std::string& text) {
    constexpr std::size_t kMostKept = 96;  // leaves room for a suffix within NAME_MAX (255)
    std::string name;
    for (std::size_t i = 0; i < text.size() && name.size() < kMostKept; ++i)
        name += isPortable(static_cast<unsigned char>(text[i])) ? text[i] : '_';
    if (name.empty() || name.front() == '.') name.insert(name.begin(), '_');  // no "", ".", ".." or hidden files
    if (name == text) return name;
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "-%08llx", static_cast<unsigned long long>(hashText(text) & 0xffffffffull));
    return name + suffix;
}

bool pathExists(const std::filesystem::path& path) {
    std::error_code ec;
    const bool exists = std::filesystem::exists(path, ec);
    if (ec) throw FormatError(path.string() + ": cannot be looked up (" + ec.message() + ")");
    return exists;
}

std::optional<std::string> fileContents(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
}

}  // namespace kvscope
