// SPDX-License-Identifier: MIT
// A dataset (JSONL) through loadDataset, then answer extraction and matching on what it held.
#include "fuzz_support.h"

#include "experiments/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("dataset.jsonl", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        for (const auto& item : kvscope::experiments::loadDataset(path)) {
            using kvscope::experiments::AnswerExtraction;
            for (const auto method : {AnswerExtraction::LastNumber, AnswerExtraction::Boxed, AnswerExtraction::Regex}) {
                // The demo's pattern: a capture group after a literal and a repeat, as users write them.
                if (const auto answer = kvscope::experiments::extractAnswer(item.prompt, method, "Answer: *([0-9]+)"))
                    kvscope::experiments::answersMatch(*answer, item.answer);
            }
        }
    });
    return 0;
}
