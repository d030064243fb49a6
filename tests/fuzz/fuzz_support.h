// SPDX-License-Identifier: MIT
#pragma once
// What every fuzz harness shares: a private scratch folder (in /dev/shm where there is one, since
// every input is written to a file and read back through the product's own file readers) and the
// rule the harnesses enforce. An input may be refused only with a kvscope::Error (the typed error
// whose message names the file and field); any other exception escapes the harness, and libFuzzer
// reports it as a crash like a sanitizer finding, so a raw std::out_of_range or json.exception is
// caught as surely as a buffer overflow.
#include "core/util/error.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope::fuzz {

// The scratch folder, created on first use and removed when the process exits.
const std::string& scratchDir();

// Writes the input bytes to scratchDir()/name and returns the path.
std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size);
std::string writeScratchFile(const std::string& name, const std::string& text);

// Runs `body`, treating kvscope::Error as the expected refusal of a bad input.
template <typename Body>
void refuseOnlyWithKvscopeErrors(Body&& body) {
    try {
        body();
    } catch (const kvscope::Error&) {}
}

}  // namespace kvscope::fuzz
