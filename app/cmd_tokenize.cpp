// SPDX-License-Identifier: MIT
// kvscope tokenize / detokenize: only the tokenizer files of DIR are read.
#include "cli_common.h"
#include "core/util/json_ids.h"

#include "core/util/error.h"
#include "core/util/file_names.h"

#include <fstream>
#include <functional>
#include <iostream>

namespace kvscope::cli {
namespace {

struct TokenizeOptions {
    std::string model;
    std::string text;
    std::string file;
    std::string ids;
    std::string jsonl;
    std::string messages;
    std::string chatTemplate = "auto";
    std::string templateArgs = "{}";
    bool noSpecial = false;
    bool skipSpecial = false;
    bool json = false;
};

std::string readWholeFile(const std::string& path) {
    auto bytes = fileContents(path);
    if (!bytes) throw UsageError(path + ": cannot open");
    return std::move(*bytes);
}

// --jsonl: one JSON value per input line in, one JSON object per line out, in order, so another
// implementation can be compared over thousands of inputs in one process. A bad line is an error
// naming the file and line.
void forEachJsonLine(const std::string& path, const std::function<nlohmann::json(const nlohmann::json&)>& convert) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(path + ": cannot open");
    std::string line;
    for (int lineNumber = 1; std::getline(in, line); ++lineNumber) {
        if (line.empty()) continue;
        nlohmann::json value;
        try {
            value = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw UsageError(path + ":" + std::to_string(lineNumber) + ": not a JSON value (" + e.what() + ")");
        }
        try {
            std::cout << convert(value).dump() << "\n";
        } catch (const nlohmann::json::exception& e) {  // e.g. a number where a string belongs
            throw UsageError(path + ":" + std::to_string(lineNumber) + ": " + e.what());
        } catch (const Error& e) {  // e.g. an id outside the vocabulary
            throw UsageError(path + ":" + std::to_string(lineNumber) + ": " + e.what());
        }
    }
}

void printIds(const std::vector<int64_t>& ids) {
    for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
    std::cout << "\n";
}

// --messages: the conversation rendered by the chosen template, then tokenized as
// apply_chat_template tokenizes it.
void tokenizeConversation(const TokenizeOptions& o, const Tokenizer& t) {
    const ChatPrompt prompt = renderChat(parseChatTemplate(o.chatTemplate), o.model, readChatMessages(o.messages),
                                         templateArguments(o.templateArgs));
    const auto ids = t.encode(prompt.text, prompt.addSpecialTokens);
    if (o.json)
        std::cout << nlohmann::json{{"ids", ids}, {"text", prompt.text}, {"chat_template", prompt.templateUsed}}.dump()
                  << "\n";
    else
        printIds(ids);
}

}  // namespace

void addTokenizeCommands(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of a text");
    tok->add_option("--model", o->model, "Model directory holding tokenizer.json, or a GGUF file")
        ->required()
        ->check(kModelPath);
    auto* text = tok->add_option("--text", o->text, "Text to tokenize");
    auto* file = tok->add_option("--file", o->file, "File whose contents to tokenize")->check(CLI::ExistingFile);
    auto* jsonl =
        tok->add_option("--jsonl", o->jsonl, "File of JSON strings, one a line: prints {\"ids\": [...]} a line")
            ->check(CLI::ExistingFile);
    auto* messages =
        tok->add_option("--messages", o->messages,
                        "JSON file of [{\"role\", \"content\"}, ...]: tokenizes the conversation rendered by "
                        "--chat-template with the assistant's turn opened, as transformers' apply_chat_template")
            ->check(CLI::ExistingFile);
    tok->add_option("--chat-template", o->chatTemplate,
                    "With --messages: auto (default: the checkpoint's own template; the text as is where it has none), "
                    "plain, chatml or llama3");
    tok->add_option("--template-args", o->templateArgs,
                    "With --messages: a JSON object of the template's keyword arguments, e.g. "
                    "'{\"enable_thinking\": false, \"date_string\": \"26 Jul 2024\"}'");
    text->excludes(file, jsonl, messages);
    file->excludes(text, jsonl, messages);
    jsonl->excludes(text, file, messages);
    tok->add_flag("--no-special", o->noSpecial, "Do not apply the post-processor (e.g. Llama 3's BOS)");
    tok->add_flag("--json", o->json, "Print {\"ids\": [...]}");
    tok->callback([o, text, file, jsonl, messages] {
        if (text->count() + file->count() + jsonl->count() + messages->count() == 0)
            throw UsageError("tokenize needs --text, --file, --jsonl or --messages");
        Tokenizer t = Tokenizer::fromModelDir(o->model);
        if (messages->count()) {
            tokenizeConversation(*o, t);
            return;
        }
        if (jsonl->count()) {
            forEachJsonLine(o->jsonl, [&](const nlohmann::json& line) {
                return nlohmann::json{{"ids", t.encode(line.get<std::string>(), !o->noSpecial)}};
            });
            return;
        }
        const std::string input = file->count() ? readWholeFile(o->file) : o->text;
        const auto ids = t.encode(input, !o->noSpecial);
        if (o->json)
            std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
        else
            printIds(ids);
    });

    CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids");
    detok->add_option("--model", o->model, "Model directory holding tokenizer.json, or a GGUF file")
        ->required()
        ->check(kModelPath);
    auto* ids = detok->add_option("--ids", o->ids, "Token ids: 1,2,3");
    auto* idLists =
        detok->add_option("--jsonl", o->jsonl, "File of JSON id lists, one a line: prints {\"text\": ...} a line")
            ->check(CLI::ExistingFile);
    ids->excludes(idLists);
    idLists->excludes(ids);
    detok->add_flag("--skip-special", o->skipSpecial, "Leave special tokens out of the text");
    detok->add_flag("--json", o->json, "Print {\"text\": \"...\"}");
    detok->callback([o, ids, idLists] {
        if (ids->count() + idLists->count() == 0) throw UsageError("detokenize needs --ids or --jsonl");
        Tokenizer t = Tokenizer::fromModelDir(o->model);
        if (idLists->count()) {
            forEachJsonLine(o->jsonl, [&](const nlohmann::json& line) {
                return nlohmann::json{{"text", t.decode(tokenIdsFromJson(line, o->jsonl), o->skipSpecial)}};
            });
            return;
        }
        const std::string text = t.decode(parseIdList(o->ids, "--ids"), o->skipSpecial);
        if (o->json)
            std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
        else
            std::cout << text << "\n";
    });
}

}  // namespace kvscope::cli
