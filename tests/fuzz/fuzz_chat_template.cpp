// SPDX-License-Identifier: MIT
// A chat template (tokenizer_config.json's chat_template or chat_template.jinja): parsing builds
// the statements and expressions; rendering runs them over a fixed conversation with the
// variables transformers passes. Refusals must be kvscope errors, never crashes or hangs.
#include "fuzz_support.h"

#include "core/text/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string source(reinterpret_cast<const char*>(data), size);
    kvscope::fuzz::refuseOnlyWithKvscopeErrors([&] {
        const auto compiled = kvscope::jinja::Template::parse(source, "fuzz/chat_template.jinja");
        const nlohmann::ordered_json variables = {
            {"messages",
             {{{"role", "system"}, {"content", "Be brief."}},
              {{"role", "user"}, {"content", "Hi\nthere <|im_start|>"}},
              {{"role", "assistant"}, {"content", "<think>\nx\n</think>\n\nHello"}}}},
            {"add_generation_prompt", true},
            {"bos_token", "<s>"},
            {"eos_token", "</s>"},
            {"tools", nullptr},
            {"documents", nullptr},
            {"enable_thinking", false},
            {"date_string", "26 Jul 2024"}};
        compiled.render(variables);
    });
    return 0;
}
