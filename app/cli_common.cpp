#include "cli_common.h"

#include "core/util/threads.h"

#include <iostream>
#include <thread>

namespace kvscope::cli {

void addThreadsOption(CLI::App* cmd, int& threads) {
    cmd->add_option("--threads", threads, "Intra-op threads (default: all cores)")->check(CLI::NonNegativeNumber);
}

void addModelOptions(CLI::App* cmd, ModelOptions& o) {
    cmd->add_option("--model", o.model, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
        ->required()
        ->check(CLI::ExistingDirectory);
    cmd->add_option("--dtype", o.dtype, "Compute dtype: fp32, bf16, or fp16 (CUDA only)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
    cmd->add_option("--device", o.device, "cpu, cuda or cuda:N");
    addThreadsOption(cmd, o.threads);
}

void applyThreads(int threads) { configureThreads(threads); }

Transformer loadModel(const ModelOptions& o) {
    applyThreads(o.threads);
    LoadReport report;
    Transformer model = Transformer::load(o.model, parseDtype(o.dtype), parseDevice(o.device), &report);
    if (!report.unusedTensors.empty())
        std::cerr << "kvscope: warning: " << report.unusedTensors.size() << " tensor(s) in " << o.model
                  << " are not used by the model, e.g. '" << report.unusedTensors.front() << "'\n";
    return model;
}

nlohmann::json stepToJson(const StepRecord& s) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& t : s.top) top.push_back({t.id, t.logit});
    return {{"id", s.id}, {"logprob", s.logprob}, {"margin", s.margin}, {"entropy", s.entropy}, {"top", top}};
}

nlohmann::json generationToJson(const std::vector<int64_t>& promptIds, const GenerationResult& r,
                                const std::string& text) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : r.steps) steps.push_back(stepToJson(s));
    return {{"prompt_ids", promptIds},
            {"generated_ids", r.ids},
            {"text", text},
            {"stop_reason", stopReasonName(r.stopReason)},
            {"steps", steps}};
}

}  // namespace kvscope::cli
