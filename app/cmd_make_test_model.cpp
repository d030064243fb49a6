// SPDX-License-Identifier: MIT
// kvscope make-test-model: a deterministic random checkpoint in real Hugging Face format.
#include "cli_common.h"

#include "core/model/random_checkpoint.h"

#include <iostream>

namespace kvscope::cli {
namespace {

struct MakeTestModelOptions {
    std::string arch = "qwen2";
    std::string out;
    std::string dtype = "fp32";
    std::string shape = "tiny";
    RandomCheckpointSpec spec;
    int threads = 0;
};

Architecture parseArch(const std::string& name) {
    if (name == "qwen2") return Architecture::Qwen2;
    if (name == "llama") return Architecture::Llama;
    return Architecture::Qwen3;
}

}  // namespace

void addMakeTestModelCommand(CLI::App& app) {
    auto o = std::make_shared<MakeTestModelOptions>();
    CLI::App* cmd = app.add_subcommand("make-test-model", "Write a deterministic random checkpoint in HF format");
    cmd->add_option("--arch", o->arch, "qwen2, llama or qwen3")->check(CLI::IsMember({"qwen2", "llama", "qwen3"}));
    cmd->add_option("--out", o->out, "Output directory")->required();
    cmd->add_option("--shape", o->shape, "tiny (default, sizes below) or qwen2.5-0.5b (exact shape, ~0.5B params)")
        ->check(CLI::IsMember({"tiny", "qwen2.5-0.5b"}));
    cmd->add_option("--seed", o->spec.seed, "Seed of the weights");
    cmd->add_option("--hidden-size", o->spec.hiddenSize)->check(kPositive);
    cmd->add_option("--layers", o->spec.numLayers)->check(kPositive);
    cmd->add_option("--heads", o->spec.numHeads)->check(kPositive);
    cmd->add_option("--kv-heads", o->spec.numKvHeads)->check(kPositive);
    cmd->add_option("--head-dim", o->spec.headDim, "Default: hidden / heads")->check(kNonNegative);
    cmd->add_option("--intermediate-size", o->spec.intermediateSize)->check(kPositive);
    cmd->add_option("--vocab-size", o->spec.vocabSize, "Default: the tokenizer's size")->check(kNonNegative);
    cmd->add_option("--merges", o->spec.bpeMerges, "BPE merges of the generated tokenizer")->check(kNonNegative);
    cmd->add_option("--rope-theta", o->spec.ropeTheta);
    cmd->add_flag("--llama3-rope-scaling", o->spec.llama3RopeScaling, "Write rope_scaling of type llama3");
    cmd->add_flag("--tie-embeddings", o->spec.tieWordEmbeddings, "tie_word_embeddings = true");
    cmd->add_flag("--attention-bias", o->spec.attentionBias,
                  "attention_bias = true: q/k/v/o biases (llama, qwen3; qwen2 always has q/k/v biases)");
    cmd->add_option("--dtype", o->dtype, "Storage dtype: fp32 or bf16")->check(CLI::IsMember({"fp32", "bf16"}));
    cmd->add_option("--shards", o->spec.shards, "Write N shards + model.safetensors.index.json")->check(kPositive);
    addThreadsOption(cmd, o->threads);
    cmd->callback([o] {
        applyThreads(o->threads);
        RandomCheckpointSpec spec = o->shape == "qwen2.5-0.5b" ? qwen25HalfBillionShape() : o->spec;
        if (o->shape == "qwen2.5-0.5b") spec.seed = o->spec.seed, spec.shards = o->spec.shards;
        spec.architecture = parseArch(o->arch);
        spec.dtype = parseDtype(o->dtype);
        const ModelConfig c = writeRandomCheckpoint(spec, o->out);
        std::cout << "wrote " << architectureName(c.architecture) << " test model to " << o->out << " (" << c.numLayers
                  << " layers, hidden " << c.hiddenSize << ", vocab " << c.vocabSize << ")\n";
    });
}

}  // namespace kvscope::cli
