// SPDX-License-Identifier: MIT
#pragma once
// Built-in chat templates. kvscope does not evaluate the Jinja templates of tokenizer_config.json;
// instead it offers the formats it knows by name, and refuses any other name rather than guess.
#include <string>
#include <vector>

namespace kvscope {

struct ChatMessage {
    std::string role;     // "system", "user", "assistant"
    std::string content;
};

enum class ChatTemplate { Plain, ChatML, Llama3 };

ChatTemplate parseChatTemplate(const std::string& name);  // "plain" | "chatml" | "llama3"; UsageError otherwise
std::string chatTemplateName(ChatTemplate t);

// The prompt text for `messages`, ending where the assistant's reply begins when addGenerationPrompt.
// Plain concatenates message contents separated by newlines.
std::string applyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages,
                              bool addGenerationPrompt = true);

}  // namespace kvscope
