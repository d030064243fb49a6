// SPDX-License-Identifier: MIT
#pragma once
// config.json (+ generation_config.json) -> ModelConfig: everything the forward pass needs to know
// about a Qwen2 / Qwen2.5, Llama 2/3 or Qwen3 checkpoint, read as the pinned transformers reads what
// transformers 4.x and 5.x write (5.x moved the RoPE base into `rope_parameters`), with its defaults
// per family. A field that would change the numbers and that kvscope does not implement (another
// rope type, a sliding window, MLP biases, quantization) is refused naming it, never defaulted.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

enum class Architecture { Qwen2, Llama, Qwen3 };

std::string architectureName(Architecture arch);  // "Qwen2ForCausalLM", ...

enum class RopeType { Default, Llama3 };

struct RopeScaling {
    RopeType type = RopeType::Default;
    double factor = 1.0;                   // llama3 only, like the three below
    double lowFreqFactor = 1.0;
    double highFreqFactor = 4.0;
    int64_t originalMaxPositionEmbeddings = 8192;
};

struct ModelConfig {
    Architecture architecture = Architecture::Qwen2;
    int64_t hiddenSize = 0;
    int64_t numLayers = 0;
    int64_t numHeads = 0;
    int64_t numKvHeads = 0;
    int64_t headDim = 0;                   // config's head_dim; else hidden / heads (Qwen3: 128)
    int64_t intermediateSize = 0;
    int64_t vocabSize = 0;
    int64_t maxPositionEmbeddings = 0;
    double rmsNormEps = 1e-6;
    double ropeTheta = 10000.0;
    RopeScaling ropeScaling;
    bool tieWordEmbeddings = false;
    bool attentionBias = false;            // q/k/v projection bias (always on for Qwen2)
    bool outputBias = false;               // o_proj bias (Llama and Qwen3 with attention_bias)
    bool qkNorm = false;                   // per-head RMSNorm on q and k before RoPE (Qwen3)
    std::optional<int64_t> bosTokenId;
    std::vector<int64_t> eosTokenIds;      // config.json and generation_config.json, merged
    std::string torchDtype;                // as declared (dtype or torch_dtype), informational

    int64_t groupSize() const { return numHeads / numKvHeads; }  // query heads per KV head

    // `source` names the file in error messages. Throws ConfigError.
    static ModelConfig fromJson(const nlohmann::json& config, const std::string& source);
    // Reads DIR/config.json and, when present, DIR/generation_config.json.
    static ModelConfig load(const std::string& dir);
    // The config.json a Hugging Face loader would accept for this model.
    nlohmann::json toJson() const;
};

}  // namespace kvscope
