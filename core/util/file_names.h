// SPDX-License-Identifier: MIT
#pragma once
// A file name made from data (a dataset's item id, a run name): only [A-Za-z0-9._-] survive, so a
// path separator, "..", a leading dot or a control character in the data can never reach outside the
// folder it is written into. A name that had to change gets a hash of the original appended, so two
// ids that sanitise alike still give two files.
#include <filesystem>
#include <optional>
#include <string>

namespace kvscope {

std::string fileNameComponent(const std::string& text);

// std::filesystem::exists without its filesystem_error: a name the system refuses (too long, a
// component that is a file) is a FormatError naming the path.
bool pathExists(const std::filesystem::path& path);

// The whole file as bytes, or none where it cannot be opened (each caller names the file in its own
// kind of error).
std::optional<std::string> fileContents(const std::filesystem::path& path);

}  // namespace kvscope
