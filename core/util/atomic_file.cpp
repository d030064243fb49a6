// SPDX-License-Identifier: MIT
#include "core/util/atomic_file.h"

#include "core/util/error.h"
#include "core/util/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace kvscope {
namespace {

namespace fs = std::filesystem;

bool fsyncPath(const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = ::fsync(fd) == 0;
    ::close(fd);
    return ok;
}

}  // namespace

void syncParentFolder(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    // Some file systems refuse fsync on a folder; the rename is still atomic there, only not yet durable.
    fault::point("fsync of a folder");
    fsyncPath(parent.empty() ? std::string(".") : parent.string(), O_RDONLY | O_DIRECTORY);
}

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    const std::string partial = path + ".partial";
    try {
        {
            fault::point("create of a .partial file");
            std::ofstream out(partial, std::ios::binary | std::ios::trunc);
            if (!out) throw FormatError(partial + ": cannot open for writing");
            write(out);
            fault::point("write of a .partial file");
            if (!out.flush()) throw FormatError(partial + ": write failed (disk full?)");
        }
        fault::point("fsync of a .partial file");
        if (!fsyncPath(partial, O_RDONLY)) throw FormatError(partial + ": cannot flush to disk");
        fault::point("rename of a .partial file into place");
        if (std::rename(partial.c_str(), path.c_str()) != 0)
            throw FormatError(path + ": cannot move the finished file into place");
    } catch (...) {
        std::remove(partial.c_str());
        throw;
    }
    syncParentFolder(path);
}

void writeTextFileAtomically(const std::string& path, const std::string& text) {
    writeFileAtomically(path, [&](std::ostream& out) { out << text; });
}

int removePartialFiles(const std::string& folder) {
    std::error_code ec;
    int removed = 0;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
        if (entry.path().extension() != ".partial") continue;
        fault::point("removal of a stray .partial");
        removed += fs::remove_all(entry.path(), ec) > 0;
    }
    return removed;
}

}  // namespace kvscope
