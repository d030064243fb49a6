// SPDX-License-Identifier: MIT
#include "fuzz_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

namespace kvscope::fuzz {
namespace fs = std::filesystem;

namespace {

std::string makeScratchDir() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path dir = base / ("kvscope-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir.string();
}

}  // namespace

const std::string& scratchDir() {
    // Never destroyed: the atexit handler that removes the folder runs after static destructors
    // registered later than it, and needs the name.
    static const std::string* dir = [] {
        auto* made = new std::string(makeScratchDir());
        std::atexit([] {
            std::error_code ignored;
            fs::remove_all(*dir, ignored);
        });
        return made;
    }();
    return *dir;
}

std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size) {
    const std::string path = scratchDir() + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out.flush()) throw std::runtime_error("fuzz harness: cannot write " + path);
    return path;
}

std::string writeScratchFile(const std::string& name, const std::string& text) {
    return writeScratchFile(name, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
}

}  // namespace kvscope::fuzz
