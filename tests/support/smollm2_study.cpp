// SPDX-License-Identifier: MIT
#include "support/smollm2_study.h"

#include "support/test_support.h"

#include <filesystem>
#include <stdexcept>

namespace kvscope::test {

std::string smollm2Gguf() {
    const std::string gguf = testDataDir() + "/smollm2-135m-instruct.Q4_1.gguf";
    return std::filesystem::exists(gguf) ? gguf : "";
}

void writeSmolLM2Experiment(const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& replacements,
                            const std::string& experimentFile) {
    const std::string experiments = testDataDir() + "/../../experiments";
    std::string text = readTextFile(experiments + "/" + experimentFile);
    std::vector<std::pair<std::string, std::string>> all{{"path = \"data/", "path = \"" + experiments + "/data/"}};
    all.insert(all.end(), replacements.begin(), replacements.end());
    for (const auto& [from, to] : all) {
        const auto at = text.find(from);
        if (at == std::string::npos)
            throw std::runtime_error("experiments/" + experimentFile + " no longer has: " + from);
        text.replace(at, from.size(), to);
    }
    writeTextFile(path, text);
}

}  // namespace kvscope::test
