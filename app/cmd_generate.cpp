// SPDX-License-Identifier: MIT
// kvscope generate: prefill a prompt and decode greedily or with seeded sampling.
#include "cli_common.h"

#include "core/text/chat_template.h"
#include "core/util/error.h"

#include <iostream>
#include <optional>

namespace kvscope::cli {
namespace {

struct GenerateOptions {
    ModelOptions model;
    std::string prompt;
    std::string promptIds;
    std::string chatTemplate = "auto";
    std::string templateArgs = "{}";
    std::string system;
    DecodeOptions decode;
    std::vector<std::string> stops;
    bool json = false;
};

std::vector<int64_t> promptIdsFor(const GenerateOptions& o, const std::optional<Tokenizer>& tok) {
    if (!o.promptIds.empty()) return parseIdList(o.promptIds, "--prompt-ids");
    if (!tok) throw UsageError(o.model.model + "/tokenizer.json not found: use --prompt-ids instead of --prompt");
    const ChatTemplate t = parseChatTemplate(o.chatTemplate);
    if (t == ChatTemplate::Plain) return tok->encode(o.prompt, /*addSpecialTokens=*/true);
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    const ChatPrompt chat = renderChat(t, o.model.model, messages, templateArguments(o.templateArgs));
    return tok->encode(chat.text, chat.addSpecialTokens);
}

void run(const GenerateOptions& o) {
    parseChatTemplate(o.chatTemplate);  // an unknown name fails before the model loads
    const auto tok = tokenizerIfPresent(o.model.model);
    const std::vector<int64_t> prompt = promptIdsFor(o, tok);
    Transformer model = loadModel(o.model);

    if (!o.stops.empty() && !tok) throw UsageError("--stop needs tokenizer.json in the model directory");
    const StopRules stops = stopRulesFor(model, o.decode.maxNewTokens, false, o.stops,
                                         [&](const std::vector<int64_t>& ids) { return tok->decode(ids); });

    Generator generator(model);
    printGeneration(prompt, generator.generate(prompt, o.decode.sampling, stops), tok, o.json);
}

}  // namespace

void addGenerateCommand(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand("generate", "Prefill a prompt and decode a continuation");
    addModelOptions(cmd, o->model);
    auto* text = cmd->add_option("--prompt", o->prompt, "Prompt text (tokenized with DIR/tokenizer.json)");
    auto* ids = cmd->add_option("--prompt-ids", o->promptIds, "Prompt as integer token ids: 1,2,3");
    text->excludes(ids);
    ids->excludes(text);
    cmd->add_option("--chat-template", o->chatTemplate,
                    "auto (default: the checkpoint's own template, as transformers' apply_chat_template renders it; "
                    "the text as is where it has none), plain (text as is), chatml (Qwen) or llama3");
    cmd->add_option("--template-args", o->templateArgs,
                    "A JSON object of the chat template's keyword arguments, e.g. '{\"enable_thinking\": false}'");
    cmd->add_option("--system", o->system, "System message for chat templates");
    addDecodeOptions(cmd, o->decode);
    cmd->add_option("--stop", o->stops, "Stop when the generated text contains this string (repeatable)");
    cmd->add_flag("--json", o->json, "Print one JSON object with ids, text and per-step records");
    cmd->callback([o, text, ids] {
        if (text->count() == 0 && ids->count() == 0) throw UsageError("generate needs --prompt or --prompt-ids");
        run(*o);
    });
}

}  // namespace kvscope::cli
