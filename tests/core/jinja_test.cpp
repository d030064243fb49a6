// SPDX-License-Identifier: MIT
// The Jinja subset against what Jinja2 renders in transformers' chat-template environment
// (tests/data/tokenizer/make_jinja_cases.py wrote the expected text), and its refusals.
#include "core/text/chat_template.h"
#include "core/text/jinja.h"
#include "core/util/error.h"
#include "support/expect_error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

namespace kvscope {
namespace {

nlohmann::ordered_json jinjaCases() {
    return nlohmann::ordered_json::parse(test::readTextFile(test::testDataDir() + "/tokenizer/jinja_cases.json"));
}

TEST(Jinja, RendersAsJinja2DoesInTransformersEnvironment) {
    const auto data = jinjaCases();
    int checked = 0;
    for (const auto& c : data["cases"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        const auto t = jinja::Template::parse(c["template"].get<std::string>(), name);
        EXPECT_EQ(t.render(data["variables"]), c["output"].get<std::string>());
        ++checked;
    }
    EXPECT_EQ(checked, 21);
}

TEST(Jinja, RefusalsNameWhatAndWhere) {
    const auto data = jinjaCases();  // named: a range-for over a temporary's member would dangle
    for (const auto& e : data["errors"]) {
        const std::string name = e["name"];
        SCOPED_TRACE(name);
        try {
            jinja::Template::parse(e["template"].get<std::string>(), "tpl").render(data["variables"]);
            ADD_FAILURE() << "not refused";
        } catch (const Error& error) {
            const std::string what = error.what();
            EXPECT_NE(what.find("tpl"), std::string::npos) << what;
            EXPECT_NE(what.find(e["fragment"].get<std::string>()), std::string::npos) << what;
        }
    }
}

TEST(ChatTemplates, AutoUsesTheCheckpointsTemplateWithItsSpecialTokens) {
    test::TempDir dir;
    const std::string model = dir.file("m");
    std::filesystem::create_directories(model);
    const std::vector<ChatMessage> messages = {{"user", "hi"}};
    // No template: the text as is, with the post-processor's special tokens.
    ChatPrompt plain = renderChat(ChatTemplate::Auto, model, messages);
    EXPECT_EQ(plain.text, "hi");
    EXPECT_TRUE(plain.addSpecialTokens);
    EXPECT_NE(plain.templateUsed.find("has no chat template"), std::string::npos);
    // tokenizer_config.json's template and special tokens (a string, or an AddedToken object).
    test::writeTextFile(model + "/tokenizer_config.json",
                        R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                            "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}{% if flag %}!{% endif %}"})");
    ChatPrompt own = renderChat(ChatTemplate::Auto, model, messages, {{"flag", true}});
    EXPECT_EQ(own.text, "<s>[hi]</s>!");
    EXPECT_FALSE(own.addSpecialTokens);
    // chat_template.jinja wins, as transformers reads it.
    test::writeTextFile(model + "/chat_template.jinja", "J{{ messages[0].content }}{{ add_generation_prompt }}");
    EXPECT_EQ(renderChat(ChatTemplate::Auto, model, messages).text, "JhiTrue");
    EXPECT_EQ(renderChat(ChatTemplate::ChatML, model, messages).text,
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    test::writeTextFile(model + "/chat_template.jinja",
                        "{% for m in messages %}\n{{ m.content|wordcount }}{% endfor %}");
    test::expectErrorContaining<FormatError>([&] { renderChat(ChatTemplate::Auto, model, messages); },
                                             {"chat_template.jinja", "line 2", "wordcount"});
}

}  // namespace
}  // namespace kvscope
