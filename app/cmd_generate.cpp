// kvscope generate: prefill a prompt and decode greedily or with seeded sampling.
#include "cli_common.h"

#include "core/text/chat_template.h"
#include "core/util/error.h"

#include <filesystem>
#include <iostream>
#include <optional>

namespace kvscope::cli {
namespace {

struct GenerateOptions {
    ModelOptions model;
    std::string prompt;
    std::string promptIds;
    std::string chatTemplate = "plain";
    std::string system;
    int64_t maxNewTokens = 64;
    double temperature = 0.0;
    int64_t topK = 0;
    double topP = 1.0;
    std::uint64_t seed = 0;
    std::vector<std::string> stops;
    bool json = false;
};

std::optional<Tokenizer> tokenizerIfPresent(const std::string& dir) {
    if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) return std::nullopt;
    return Tokenizer::fromModelDir(dir);
}

std::vector<int64_t> promptIdsFor(const GenerateOptions& o, const std::optional<Tokenizer>& tok) {
    if (!o.promptIds.empty()) return parseIdList(o.promptIds);
    if (!tok) throw UsageError(o.model.model + "/tokenizer.json not found: use --prompt-ids instead of --prompt");
    const ChatTemplate t = parseChatTemplate(o.chatTemplate);
    if (t == ChatTemplate::Plain) return tok->encode(o.prompt, /*addSpecialTokens=*/true);
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    // A chat template writes its own special tokens; the post-processor must not add more.
    return tok->encode(applyChatTemplate(t, messages), /*addSpecialTokens=*/false);
}

void run(const GenerateOptions& o) {
    parseChatTemplate(o.chatTemplate);  // an unknown name fails before the model loads
    const auto tok = tokenizerIfPresent(o.model.model);
    const std::vector<int64_t> prompt = promptIdsFor(o, tok);
    Transformer model = loadModel(o.model);

    SamplingParams sampling{o.temperature, o.topK, o.topP, o.seed};
    StopRules stops;
    stops.maxNewTokens = o.maxNewTokens;
    stops.eosIds = model.config().eosTokenIds;
    stops.stopStrings = o.stops;
    if (tok) stops.detokenize = [&](const std::vector<int64_t>& ids) { return tok->decode(ids); };
    if (!o.stops.empty() && !tok) throw UsageError("--stop needs tokenizer.json in the model directory");

    Generator generator(model);
    const bool streamText = !o.json && tok;
    std::string printed;
    auto onToken = [&](const StepRecord&, int64_t) { return true; };
    GenerationResult result = generator.generate(prompt, sampling, stops, onToken);
    const std::string text = tok ? tok->decode(result.ids) : std::string();
    if (o.json) {
        std::cout << generationToJson(prompt, result, text).dump() << "\n";
    } else if (streamText) {
        std::cout << text << "\n";
    } else {
        for (std::size_t i = 0; i < result.ids.size(); ++i) std::cout << (i ? "," : "") << result.ids[i];
        std::cout << "\n";
    }
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
    cmd->add_option("--chat-template", o->chatTemplate, "plain (text as is), chatml (Qwen) or llama3");
    cmd->add_option("--system", o->system, "System message for chat templates");
    cmd->add_option("--max-new-tokens", o->maxNewTokens, "Stop after this many new tokens")->check(CLI::PositiveNumber);
    cmd->add_option("--temperature", o->temperature, "0 = greedy (default); >0 samples")->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-k", o->topK, "Sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
    cmd->add_option("--top-p", o->topP, "Nucleus sampling mass (1 = off)")->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seed", o->seed, "Seed for sampling; a draw depends only on (seed, position)");
    cmd->add_option("--stop", o->stops, "Stop when the generated text contains this string (repeatable)");
    cmd->add_flag("--json", o->json, "Print one JSON object with ids, text and per-step records");
    cmd->callback([o, text, ids] {
        if (text->count() == 0 && ids->count() == 0) throw UsageError("generate needs --prompt or --prompt-ids");
        run(*o);
    });
}

}  // namespace kvscope::cli
