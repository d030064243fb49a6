// SPDX-License-Identifier: MIT
#pragma once
// Deterministic random checkpoints in real Hugging Face format (config.json, model.safetensors or
// shards + index, tokenizer.json, generation_config.json), read back by the ordinary loader. A
// product feature: `kvscope make-test-model`, experiment files' [model.generate] and `kvscope bench`
// (any shape, e.g. Qwen2.5-0.5B's) make models with it where no weights can be downloaded; the tests
// use it for the same reason.
#include "core/model/config.h"

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace kvscope {

struct RandomCheckpointSpec {
    Architecture architecture = Architecture::Qwen2;
    int64_t hiddenSize = 64;
    int64_t numLayers = 2;
    int64_t numHeads = 4;
    int64_t numKvHeads = 2;
    int64_t headDim = 0;              // 0: hidden / heads
    int64_t intermediateSize = 128;
    int64_t vocabSize = 0;            // 0: exactly the tokenizer's size; larger pads like Qwen does
    int64_t maxPositionEmbeddings = 4096;
    double ropeTheta = 10000.0;
    bool llama3RopeScaling = false;
    bool tieWordEmbeddings = false;
    bool attentionBias = false;       // Llama / Qwen3: q/k/v/o biases (Qwen2 always has q/k/v ones)
    std::uint64_t seed = 0;
    torch::ScalarType dtype = torch::kFloat32;  // storage dtype of the weights
    int shards = 1;                   // >1 writes model-0000i-of-0000N.safetensors + index
    int bpeMerges = 300;              // size of the trained tokenizer beyond the 256 byte tokens
};

// The exact shape of Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
// vocab 151936, tied embeddings, q/k/v bias), used by `kvscope bench`.
RandomCheckpointSpec qwen25HalfBillionShape();

// Writes the checkpoint into `dir` (created if needed) and returns its config.
ModelConfig writeRandomCheckpoint(const RandomCheckpointSpec& spec, const std::string& dir);

}  // namespace kvscope
