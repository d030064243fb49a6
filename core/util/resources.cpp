// SPDX-License-Identifier: MIT
#include "core/util/resources.h"

#include "core/util/error.h"

#include <cstdlib>
#include <filesystem>

namespace kvscope {
namespace fs = std::filesystem;

std::vector<std::string> dataDirCandidates() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("KVSCOPE_DATA_DIR"); env && *env) dirs.emplace_back(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) dirs.push_back((exe.parent_path().parent_path() / "share" / "kvscope").lexically_normal().string());
    dirs.emplace_back(KVSCOPE_SOURCE_DIR);
    return dirs;
}

std::string findDataFile(const std::string& relative) {
    std::string looked;
    for (const std::string& dir : dataDirCandidates()) {
        const fs::path candidate = fs::path(dir) / relative;
        if (fs::exists(candidate)) return candidate.lexically_normal().string();
        looked += (looked.empty() ? "" : ", ") + candidate.string();
    }
    throw UsageError("cannot find kvscope's " + relative + " (looked in " + looked +
                     "; set KVSCOPE_DATA_DIR to the folder that holds it)");
}

std::string userDataDir() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) return (fs::path(xdg) / "kvscope").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : ".") / ".local" / "share" / "kvscope").string();
}

std::string userCacheDir() {
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "kvscope").string();
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : ".") / ".cache" / "kvscope").string();
}

}  // namespace kvscope
