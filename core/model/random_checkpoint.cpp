// SPDX-License-Identifier: MIT
#include "core/model/random_checkpoint.h"

#include "core/model/checkpoint.h"
#include "core/model/safetensors.h"
#include "core/text/bpe_trainer.h"
#include "core/util/error.h"
#include "core/util/hash.h"
#include "core/util/json_file.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace kvscope {
namespace {

namespace fs = std::filesystem;

// Text the test tokenizer is trained on: enough English, digits and arithmetic that merges are real.
const char* const kTokenizerCorpus =
    "The quick brown fox jumps over the lazy dog. A cache is built token by token while the model "
    "decodes, and a prefill builds it in one forward pass over the same tokens. Question: what is "
    "12 + 35? Step 1: add the tens. Step 2: add the ones. Answer: 47. The model thinks, then it "
    "answers. In the beginning the researchers replayed the reasoning trace and continued from the "
    "prefix. They compared the two continuations and found that they were not the same.\n"
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i * i)\n";

std::uint64_t mix(std::uint64_t x) { return splitmix64(x); }

// Uniform values with the given standard deviation, a pure function of (seed, tensor, element), so
// the result does not depend on libtorch's generators or on thread count.
torch::Tensor deterministicUniform(std::vector<int64_t> shape, double stddev, double mean, std::uint64_t seed,
                                   std::uint64_t tensorIndex) {
    torch::Tensor t = torch::empty(shape, torch::kFloat32);
    float* p = t.data_ptr<float>();
    const double halfWidth = stddev * std::sqrt(3.0);
    const std::uint64_t base = mix(mix(seed) ^ mix(tensorIndex + 1));
    at::parallel_for(0, t.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const double u = static_cast<double>(mix(base + static_cast<std::uint64_t>(i)) >> 11) * 0x1.0p-53;
            p[i] = static_cast<float>(mean + (2.0 * u - 1.0) * halfWidth);
        }
    });
    return t;
}

torch::Tensor initialTensor(const ExpectedTensor& e, const RandomCheckpointSpec& spec, std::uint64_t index) {
    const bool isNorm = e.name.find("norm.weight") != std::string::npos;
    const bool isBias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    const bool isEmbedding = e.name == "model.embed_tokens.weight";
    if (isNorm) return deterministicUniform(e.shape, 0.1, 1.0, spec.seed, index);  // around 1, not exactly 1
    if (isBias) return deterministicUniform(e.shape, 0.1, 0.0, spec.seed, index);
    if (isEmbedding) return deterministicUniform(e.shape, 1.0, 0.0, spec.seed, index);
    const double fanIn = static_cast<double>(e.shape.back());
    return deterministicUniform(e.shape, 1.0 / std::sqrt(fanIn), 0.0, spec.seed, index);
}

void writeWeights(const ModelConfig& config, const RandomCheckpointSpec& spec, const fs::path& dir) {
    const auto expected = expectedTensors(config);
    const int shards = std::max(1, std::min<int>(spec.shards, static_cast<int>(expected.size())));
    nlohmann::json weightMap = nlohmann::json::object();
    std::size_t totalBytes = 0, next = 0;
    for (int s = 0; s < shards; ++s) {
        const std::size_t end = expected.size() * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(shards);
        char name[64];
        std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
        const std::string file = shards == 1 ? "model.safetensors" : name;
        std::vector<std::pair<std::string, torch::Tensor>> tensors;
        for (; next < end; ++next) {
            torch::Tensor t = initialTensor(expected[next], spec, next).to(spec.dtype);
            totalBytes += static_cast<std::size_t>(t.numel() * t.element_size());
            weightMap[expected[next].name] = file;
            tensors.emplace_back(expected[next].name, std::move(t));
        }
        writeSafetensors((dir / file).string(), tensors, {{"format", "pt"}});
    }
    if (shards > 1)
        writeJsonFile((dir / "model.safetensors.index.json").string(),
                      {{"metadata", {{"total_size", totalBytes}}}, {"weight_map", weightMap}});
}

}  // namespace

RandomCheckpointSpec qwen25HalfBillionShape() {
    RandomCheckpointSpec s;
    s.architecture = Architecture::Qwen2;
    s.hiddenSize = 896;
    s.numLayers = 24;
    s.numHeads = 14;
    s.numKvHeads = 2;
    s.intermediateSize = 4864;
    s.vocabSize = 151936;
    s.maxPositionEmbeddings = 32768;
    s.ropeTheta = 1000000.0;
    s.tieWordEmbeddings = true;
    return s;
}

ModelConfig writeRandomCheckpoint(const RandomCheckpointSpec& spec, const std::string& dirName) {
    const fs::path dir(dirName);
    fs::create_directories(dir);

    const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    TrainedBpe bpe = trainByteLevelBpe({kTokenizerCorpus}, spec.bpeMerges);
    const int64_t tokenizerSize = static_cast<int64_t>(bpe.vocab.size() + specials.size());
    const int64_t endOfText = static_cast<int64_t>(bpe.vocab.size());
    const int64_t imEnd = endOfText + 2;
    if (spec.vocabSize != 0 && spec.vocabSize < tokenizerSize)
        throw UsageError("--vocab-size " + std::to_string(spec.vocabSize) + " is smaller than the tokenizer (" +
                         std::to_string(tokenizerSize) + " tokens)");

    ModelConfig c;
    c.architecture = spec.architecture;
    c.hiddenSize = spec.hiddenSize;
    c.numLayers = spec.numLayers;
    c.numHeads = spec.numHeads;
    c.numKvHeads = spec.numKvHeads;
    c.headDim =
        spec.headDim ? spec.headDim : spec.hiddenSize / std::max<int64_t>(1, spec.numHeads);  // 0 heads: refused below
    c.intermediateSize = spec.intermediateSize;
    c.vocabSize = spec.vocabSize ? spec.vocabSize : tokenizerSize;
    c.maxPositionEmbeddings = spec.maxPositionEmbeddings;
    c.ropeTheta = spec.ropeTheta;
    if (spec.llama3RopeScaling) {
        c.ropeScaling.type = RopeType::Llama3;
        c.ropeScaling.factor = 8.0;
        c.ropeScaling.originalMaxPositionEmbeddings = 64;  // tiny, so short tests cross every band
    }
    c.tieWordEmbeddings = spec.tieWordEmbeddings;
    c.attentionBias = spec.architecture == Architecture::Qwen2 || spec.attentionBias;
    c.outputBias = spec.architecture != Architecture::Qwen2 && spec.attentionBias;
    c.qkNorm = spec.architecture == Architecture::Qwen3;
    c.eosTokenIds = {endOfText};
    c.torchDtype = spec.dtype == torch::kBFloat16 ? "bfloat16" : "float32";
    // Round-trip through the JSON parser so a spec that the loader would reject fails here.
    c = ModelConfig::fromJson(c.toJson(), "generated config");

    // Every file is written atomically and config.json last: a folder without config.json is "no
    // model yet", so generation interrupted at any point is simply redone by the next run.
    removePartialFiles(dir.string());
    writeJsonFile((dir / "generation_config.json").string(),
                  {{"eos_token_id", {endOfText, imEnd}}, {"do_sample", false}});
    writeJsonFile((dir / "tokenizer.json").string(), makeTokenizerJson(bpe, specials));
    writeWeights(c, spec, dir);
    writeJsonFile((dir / "config.json").string(), c.toJson());
    return c;
}

}  // namespace kvscope
