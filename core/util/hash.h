// SPDX-License-Identifier: MIT
#pragma once
// splitmix64's finaliser: a fast, well-mixed hash of one 64-bit word. kvscope's deterministic
// generators (test checkpoints, the demo task) are built on it, so their numbers are the same on
// every platform and standard library.
#include <cstdint>
#include <string>

namespace kvscope {

inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// FNV-1a over the bytes, then splitmix64: a stable 64-bit hash of a text (split buckets, suffixes that
// keep sanitised file names distinct).
inline std::uint64_t hashText(const std::string& text) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    return splitmix64(h);
}

}  // namespace kvscope
