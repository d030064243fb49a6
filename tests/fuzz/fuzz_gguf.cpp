// SPDX-License-Identifier: MIT
// A .gguf file: header, metadata, tensor table and data. Every tensor the header accepts is
// dequantized; the model config, tensor names and tokenizer are read from the metadata as a model
// load would.
#include "fuzz_support.h"

#include "core/model/gguf_model.h"
#include "core/text/gguf_tokenizer.h"
#include "core/text/tokenizer.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kvscope::fuzz::writeScratchFile("input.gguf", data, size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const kvscope::GgufFile file(path);
        for (const auto& t : file.tensors()) {
            if (t.elements() > (1 << 20)) continue;  // a header may promise far more than the harness should allocate
            std::vector<float> out(static_cast<std::size_t>(t.elements()));
            kvscope::dequantizeToFloat(t.type, file.bytesOf(t), t.elements(), out.data());
        }
        kvscope::ggufTensorsByHfName(file);
        kvscope::ggufChatTemplate(file);
        kvscope::Tokenizer::fromJson(kvscope::ggufTokenizerJson(file).dump(), path);
        kvscope::ggufModelConfig(file);
    });
    return 0;
}
