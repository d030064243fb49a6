// SPDX-License-Identifier: MIT
#pragma once
// Asserts that `f` throws E and that the message contains every fragment (a file name, a field, what
// was expected), so a test pins what the user reads, not only that something failed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace kvscope::test {

template <typename E>
void expectErrorContaining(const std::function<void()>& f, const std::vector<std::string>& fragments) {
    try {
        f();
        FAIL() << "expected an error";
    } catch (const E& e) {
        for (const auto& fragment : fragments)
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

}  // namespace kvscope::test
