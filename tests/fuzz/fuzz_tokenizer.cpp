// SPDX-License-Identifier: MIT
// tokenizer.json: loading builds the normaliser, pre-tokeniser regex, BPE ranks and added tokens;
// encoding and decoding then run every component the file declared on a fixed mixed text and on
// ids around the vocabulary's edges.
#include "fuzz_support.h"

#include "core/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string json(reinterpret_cast<const char*>(data), size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const auto tokenizer = kvscope::Tokenizer::fromJson(json, "fuzz/tokenizer.json");
        const auto ids =
            tokenizer.encode("Step 2: 48+37=85\n  caf\xc3\xa9 <|im_end|> \xf0\x9f\x98\x80 x<s> \x04\xe2\x96\x81", true);
        tokenizer.decode(ids, false);
        tokenizer.decode(ids, true);
        if (tokenizer.vocabSize() > 200)
            tokenizer.decode({3, 200, 130, 1}, false);  // <0xNN> runs in SentencePiece vocabularies
        tokenizer.decode({0, 1, 255, 256, 100000, -1}, false);  // refused: ids outside the vocabulary
    });
    return 0;
}
