#pragma once
// splitmix64's finaliser: a fast, well-mixed hash of one 64-bit word. kvscope's deterministic
// generators (test checkpoints, the demo task) are built on it, so their numbers are the same on
// every platform and standard library.
#include <cstdint>

namespace kvscope {

inline std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace kvscope
