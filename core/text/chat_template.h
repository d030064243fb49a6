// SPDX-License-Identifier: MIT
#pragma once
// Chat templates. `auto` renders the checkpoint's own Jinja template (tokenizer_config.json's
// chat_template, or chat_template.jinja) as transformers' apply_chat_template does (jinja.h), with
// the special tokens and keyword arguments it passes; plain, chatml and llama3 are fixed spellings
// kvscope knows by name. Any other name is refused rather than guessed.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct ChatMessage {
    std::string role;     // "system", "user", "assistant"
    std::string content;
};

enum class ChatTemplate { Auto, Plain, ChatML, Llama3 };

ChatTemplate parseChatTemplate(
    const std::string& name);  // "auto" | "plain" | "chatml" | "llama3"; UsageError otherwise
std::string chatTemplateName(ChatTemplate t);

// The prompt text of a built-in template (not Auto) for `messages`, ending where the assistant's
// reply begins when addGenerationPrompt. Plain concatenates message contents separated by newlines.
std::string applyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages,
                              bool addGenerationPrompt = true);

// A rendered conversation and how to tokenize it: a template's text carries its own special tokens
// (transformers encodes it with add_special_tokens=False); plain text gets the post-processor's.
struct ChatPrompt {
    std::string text;
    bool addSpecialTokens = false;
    std::string templateUsed;  // "auto (tokenizer_config.json)", "chatml", "plain (the checkpoint has none)", ...
};

// `messages` rendered for `t`; Auto takes the checkpoint in `modelDir`'s own template, or the
// text as is where the checkpoint has none. `templateArguments` (an object) reaches the template
// as variables, as apply_chat_template's keyword arguments do (enable_thinking, date_string, ...).
ChatPrompt renderChat(ChatTemplate t, const std::string& modelDir, const std::vector<ChatMessage>& messages,
                      const nlohmann::ordered_json& templateArguments = nlohmann::ordered_json::object(),
                      bool addGenerationPrompt = true);

// renderChat for many conversations of one checkpoint (a run's items): the checkpoint's template is
// read (its file, or a GGUF file's metadata) and compiled on the first render that needs it and
// kept, not read again per item. A failed read is not kept: the next render tries again and fails
// the same way, as renderChat would.
class ChatRenderer {
public:
    ChatRenderer(ChatTemplate t, std::string modelDir);
    ChatPrompt render(const std::vector<ChatMessage>& messages,
                      const nlohmann::ordered_json& templateArguments = nlohmann::ordered_json::object(),
                      bool addGenerationPrompt = true) const;

private:
    struct Loaded;
    const Loaded& loaded() const;

    ChatTemplate template_;
    std::string modelDir_;
    std::shared_ptr<Loaded> loaded_;
};

// [{"role": ..., "content": ...}, ...] read from a JSON file; UsageError naming the file and entry.
std::vector<ChatMessage> readChatMessages(const std::string& path);

}  // namespace kvscope
