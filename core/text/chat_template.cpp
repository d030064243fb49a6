// SPDX-License-Identifier: MIT
#include "core/text/chat_template.h"

#include "core/util/error.h"

namespace kvscope {

ChatTemplate parseChatTemplate(const std::string& name) {
    if (name == "plain") return ChatTemplate::Plain;
    if (name == "chatml") return ChatTemplate::ChatML;
    if (name == "llama3") return ChatTemplate::Llama3;
    throw UsageError("unknown chat template '" + name + "' (built in: plain, chatml, llama3)");
}

std::string chatTemplateName(ChatTemplate t) {
    switch (t) {
    case ChatTemplate::Plain: return "plain";
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    }
    return "?";
}

std::string applyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages, bool addGenerationPrompt) {
    std::string out;
    switch (t) {
    case ChatTemplate::Plain:
        for (std::size_t i = 0; i < messages.size(); ++i) out += (i ? "\n" : "") + messages[i].content;
        return out;
    case ChatTemplate::ChatML:  // Qwen: <|im_start|>role\ncontent<|im_end|>\n
        for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (addGenerationPrompt) out += "<|im_start|>assistant\n";
        return out;
    case ChatTemplate::Llama3:
        out = "<|begin_of_text|>";
        for (const auto& m : messages)
            out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        if (addGenerationPrompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
        return out;
    }
    return out;
}

}  // namespace kvscope
