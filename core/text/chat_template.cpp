// SPDX-License-Identifier: MIT
#include "core/text/chat_template.h"

#include "core/text/gguf_tokenizer.h"

#include "core/text/jinja.h"
#include "core/util/error.h"
#include "core/util/file_names.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace kvscope {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
    auto bytes = fileContents(path);
    if (!bytes) throw FormatError(path.string() + ": cannot open");
    return std::move(*bytes);
}

nlohmann::ordered_json readJson(const fs::path& path) {
    try {
        return nlohmann::ordered_json::parse(readFile(path));
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(path.string() + ": not valid JSON (" + e.what() + ")");
    }
}

// The names transformers hands a template as variables (its SPECIAL_TOKENS_ATTRIBUTES), each a
// string in tokenizer_config.json or, in older files, an AddedToken object with a "content".
const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                    "pad_token", "cls_token", "mask_token"};

struct CheckpointTemplate {
    std::string source;  // where the template came from, for errors
    std::string text;
    nlohmann::ordered_json specialTokens = nlohmann::ordered_json::object();
};

// chat_template.jinja wins over tokenizer_config.json's chat_template, as in transformers (it writes
// the file and leaves the field out). A list of named templates uses the one named "default".
std::optional<CheckpointTemplate> checkpointTemplate(const std::string& dir) {
    if (isGgufFile(dir)) {  // tokenizer.chat_template, special tokens by id
        const GgufChatTemplate gguf = ggufChatTemplate(GgufFile(dir));
        if (gguf.text.empty()) return std::nullopt;
        return CheckpointTemplate{dir + " (GGUF metadata tokenizer.chat_template)", gguf.text, gguf.specialTokens};
    }
    const fs::path configPath = fs::path(dir) / "tokenizer_config.json";
    const fs::path jinjaPath = fs::path(dir) / "chat_template.jinja";
    CheckpointTemplate t;
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    if (fs::exists(configPath)) {
        config = readJson(configPath);
        if (!config.is_object()) throw FormatError(configPath.string() + ": expected a JSON object");
        for (const char* name : kSpecialTokenNames) {
            const auto it = config.find(name);
            if (it == config.end() || it->is_null()) continue;
            if (it->is_string())
                t.specialTokens[name] = *it;
            else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
                t.specialTokens[name] = (*it)["content"];
            else
                throw FormatError(configPath.string() + ": field '" + name +
                                  "' must be a string or an object with a content");
        }
    }
    if (fs::exists(jinjaPath)) {
        t.source = jinjaPath.string();
        t.text = readFile(jinjaPath);
        return t;
    }
    const auto field = config.find("chat_template");
    if (field == config.end() || field->is_null()) return std::nullopt;
    t.source = configPath.string() + " chat_template";
    if (field->is_string()) {
        t.text = field->get<std::string>();
        return t;
    }
    if (field->is_array())
        for (const auto& named : *field)
            if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
                named["template"].is_string()) {
                t.text = named["template"].get<std::string>();
                return t;
            }
    throw FormatError(configPath.string() +
                      ": field 'chat_template' must be a string or a list of {name, template} "
                      "with one named 'default'");
}

}  // namespace

ChatTemplate parseChatTemplate(const std::string& name) {
    if (name == "auto") return ChatTemplate::Auto;
    if (name == "plain") return ChatTemplate::Plain;
    if (name == "chatml") return ChatTemplate::ChatML;
    if (name == "llama3") return ChatTemplate::Llama3;
    throw UsageError("unknown chat template '" + name +
                     "' (auto: the checkpoint's own; built in: plain, chatml, llama3)");
}

std::string chatTemplateName(ChatTemplate t) {
    switch (t) {
    case ChatTemplate::Auto: return "auto";
    case ChatTemplate::Plain: return "plain";
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    }
    return "?";
}

std::string applyChatTemplate(ChatTemplate t, const std::vector<ChatMessage>& messages, bool addGenerationPrompt) {
    std::string out;
    switch (t) {
    case ChatTemplate::Auto: throw Error("applyChatTemplate: 'auto' needs the checkpoint (renderChat)");
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

struct ChatRenderer::Loaded {
    std::once_flag once;
    std::optional<CheckpointTemplate> checkpoint;  // none: the checkpoint has no template
    std::optional<jinja::Template> compiled;
};

ChatRenderer::ChatRenderer(ChatTemplate t, std::string modelDir)
    : template_(t), modelDir_(std::move(modelDir)), loaded_(std::make_shared<Loaded>()) {}

const ChatRenderer::Loaded& ChatRenderer::loaded() const {
    std::call_once(loaded_->once, [this] {
        auto checkpoint = checkpointTemplate(modelDir_);
        if (checkpoint) loaded_->compiled = jinja::Template::parse(checkpoint->text, checkpoint->source);
        loaded_->checkpoint = std::move(checkpoint);
    });
    return *loaded_;
}

ChatPrompt renderChat(ChatTemplate t, const std::string& modelDir, const std::vector<ChatMessage>& messages,
                      const nlohmann::ordered_json& templateArguments, bool addGenerationPrompt) {
    return ChatRenderer(t, modelDir).render(messages, templateArguments, addGenerationPrompt);
}

ChatPrompt ChatRenderer::render(const std::vector<ChatMessage>& messages,
                                const nlohmann::ordered_json& templateArguments, bool addGenerationPrompt) const {
    if (!templateArguments.is_object()) throw UsageError("chat template arguments must be a JSON object");
    if (template_ != ChatTemplate::Auto)
        return {applyChatTemplate(template_, messages, addGenerationPrompt), template_ == ChatTemplate::Plain,
                chatTemplateName(template_)};
    const auto& checkpoint = loaded().checkpoint;
    if (!checkpoint)
        return {applyChatTemplate(ChatTemplate::Plain, messages), true, "plain (the checkpoint has no chat template)"};
    // The variables apply_chat_template gives: special tokens, then its keyword arguments over them.
    nlohmann::ordered_json variables = checkpoint->specialTokens;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    variables["messages"] = list;
    variables["tools"] = nullptr;
    variables["documents"] = nullptr;
    variables["add_generation_prompt"] = addGenerationPrompt;
    for (auto it = templateArguments.begin(); it != templateArguments.end(); ++it) variables[it.key()] = it.value();
    return {loaded().compiled->render(variables), false, "auto (" + checkpoint->source + ")"};
}

std::vector<ChatMessage> readChatMessages(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(path + ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw UsageError(path + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_array()) throw UsageError(path + ": expected a list of {\"role\", \"content\"} objects");
    std::vector<ChatMessage> messages;
    for (std::size_t i = 0; i < j.size(); ++i) {
        const auto& m = j[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string())
            throw UsageError(path + ": message " + std::to_string(i) +
                             " must be {\"role\": string, \"content\": string}");
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    return messages;
}

}  // namespace kvscope
