// kvscope tokenize / detokenize: only the tokenizer files of DIR are read.
#include "cli_common.h"

#include "core/util/error.h"

#include <fstream>
#include <iostream>
#include <sstream>

namespace kvscope::cli {
namespace {

struct TokenizeOptions {
    std::string model;
    std::string text;
    std::string file;
    std::string ids;
    bool noSpecial = false;
    bool skipSpecial = false;
    bool json = false;
};

std::string readWholeFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

void addTokenizeCommands(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* tok = app.add_subcommand("tokenize", "Print the token ids of a text");
    tok->add_option("--model", o->model, "Model directory holding tokenizer.json")->required()->check(CLI::ExistingDirectory);
    auto* text = tok->add_option("--text", o->text, "Text to tokenize");
    auto* file = tok->add_option("--file", o->file, "File whose contents to tokenize")->check(CLI::ExistingFile);
    text->excludes(file);
    file->excludes(text);
    tok->add_flag("--no-special", o->noSpecial, "Do not apply the post-processor (e.g. Llama 3's BOS)");
    tok->add_flag("--json", o->json, "Print {\"ids\": [...]}");
    tok->callback([o, text, file] {
        if (text->count() == 0 && file->count() == 0) throw UsageError("tokenize needs --text or --file");
        Tokenizer t = Tokenizer::fromModelDir(o->model);
        const std::string input = file->count() ? readWholeFile(o->file) : o->text;
        const auto ids = t.encode(input, !o->noSpecial);
        if (o->json) {
            std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
        } else {
            for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? "," : "") << ids[i];
            std::cout << "\n";
        }
    });

    CLI::App* detok = app.add_subcommand("detokenize", "Print the text of token ids");
    detok->add_option("--model", o->model, "Model directory holding tokenizer.json")->required()->check(CLI::ExistingDirectory);
    detok->add_option("--ids", o->ids, "Token ids: 1,2,3")->required();
    detok->add_flag("--skip-special", o->skipSpecial, "Leave special tokens out of the text");
    detok->add_flag("--json", o->json, "Print {\"text\": \"...\"}");
    detok->callback([o] {
        Tokenizer t = Tokenizer::fromModelDir(o->model);
        const std::string text = t.decode(parseIdList(o->ids), o->skipSpecial);
        if (o->json) std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
        else std::cout << text << "\n";
    });
}

}  // namespace kvscope::cli
