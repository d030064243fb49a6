// SPDX-License-Identifier: MIT
// Loading HF checkpoint directories: config.json semantics, shards, and the errors for bad ones.
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "support/expect_error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

namespace kvscope {
namespace {
namespace fs = std::filesystem;

// A writable copy of a tiny model that a test may break.
std::string copyOf(const std::string& variant, const test::TempDir& dir) {
    const std::string dst = dir.file("model");
    fs::copy(test::tinyModel(variant), dst, fs::copy_options::recursive);
    return dst;
}

nlohmann::json readJson(const std::string& path) { return nlohmann::json::parse(test::readTextFile(path)); }
void writeJson(const std::string& path, const nlohmann::json& j) { test::writeTextFile(path, j.dump(2)); }

using test::expectErrorContaining;

// Rewrites DIR/model.safetensors with `name` replaced by `replacement`.
void replaceTensor(const std::string& modelDir, const std::string& name, const torch::Tensor& replacement) {
    const std::string path = modelDir + "/model.safetensors";
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    {
        SafetensorsFile f(path);
        for (const auto& e : f.entries())
            tensors.emplace_back(e.name, e.name == name ? replacement : f.read(e.name).clone());
    }
    writeSafetensors(path, tensors);
}

TEST(ModelConfig, ReadsHuggingFaceFieldsAndDefaults) {
    nlohmann::json j = {{"architectures", {"Qwen2ForCausalLM"}},
                        {"hidden_size", 896},
                        {"num_hidden_layers", 24},
                        {"num_attention_heads", 14},
                        {"num_key_value_heads", 2},
                        {"intermediate_size", 4864},
                        {"vocab_size", 151936},
                        {"rope_theta", 1000000.0},
                        {"tie_word_embeddings", true},
                        {"eos_token_id", 151643},
                        {"bos_token_id", 151643},
                        {"torch_dtype", "bfloat16"}};
    ModelConfig c = ModelConfig::fromJson(j, "config.json");
    EXPECT_EQ(c.headDim, 64);
    EXPECT_TRUE(c.attentionBias);  // Qwen2 always has q/k/v bias
    EXPECT_FALSE(c.qkNorm);
    EXPECT_EQ(c.groupSize(), 7);
    EXPECT_DOUBLE_EQ(c.ropeTheta, 1e6);
    EXPECT_EQ(c.eosTokenIds, std::vector<int64_t>{151643});
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["head_dim"] = 128;
    c = ModelConfig::fromJson(j, "config.json");
    EXPECT_TRUE(c.qkNorm);
    EXPECT_FALSE(c.attentionBias);
    EXPECT_EQ(c.headDim, 128);
}

TEST(ModelConfig, GenerationConfigEosListsAreMerged) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    writeJson(m + "/generation_config.json", {{"eos_token_id", {1, 2, 3}}});
    ModelConfig c = ModelConfig::load(m);
    EXPECT_EQ(c.eosTokenIds.size(), 4u);  // the config's own eos plus 1, 2, 3
}

TEST(ModelConfig, UnknownArchitectureIsNamed) {
    nlohmann::json j = {{"architectures", {"GPTNeoXForCausalLM"}}, {"hidden_size", 8}};
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(j, "x/config.json"); },
                                       {"x/config.json", "architectures", "GPTNeoXForCausalLM"});
}

TEST(ModelConfig, MalformedFieldsAreNamed) {
    nlohmann::json good = readJson(test::tinyModel("qwen2") + "/config.json");
    auto broken = [&](const char* key, nlohmann::json value) {
        nlohmann::json j = good;
        if (value.is_null())
            j.erase(key);
        else
            j[key] = value;
        return j;
    };
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("hidden_size", nullptr), "c.json"); },
                                       {"c.json", "'hidden_size'", "missing"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("num_hidden_layers", "two"), "c.json"); },
                                       {"'num_hidden_layers'", "an integer from 1 to"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("num_key_value_heads", 3), "c.json"); },
                                       {"'num_key_value_heads'", "divide"});
    expectErrorContaining<ConfigError>(
        [&] { ModelConfig::fromJson(broken("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "c.json"); },
        {"rope_scaling", "yarn"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("hidden_act", "gelu"), "c.json"); },
                                       {"hidden_act", "gelu"});
    // Absurd sizes are refused before anything is allocated from them, and values that only give NaN.
    expectErrorContaining<ConfigError>(
        [&] { ModelConfig::fromJson(broken("num_hidden_layers", 1000000000), "c.json"); },
        {"c.json", "'num_hidden_layers'", "from 1 to 1024", "1000000000"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("vocab_size", 1LL << 40), "c.json"); },
                                       {"'vocab_size'", "from 1 to"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("rms_norm_eps", -1e-6), "c.json"); },
                                       {"'rms_norm_eps'", "positive finite"});
    expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(broken("rope_theta", 0), "c.json"); },
                                       {"'rope_theta'", "positive finite"});
}

// SmolLM2-135M-Instruct's config.json as transformers 5 writes it: the RoPE base only inside
// rope_parameters. Read as 4.x's top-level rope_theta alone, it loaded with base 10000 without a word.
nlohmann::json smollm2Config() {
    return nlohmann::json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu",
      "hidden_size": 576, "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
      "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9,
      "num_hidden_layers": 30, "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1,
      "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
      "tie_word_embeddings": true, "transformers_version": "5.23.0", "use_cache": true, "vocab_size": 49152})");
}

// Llama 3.2's RoPE as 4.x writes it (top-level base, `rope_scaling`) and as 5.x does (`rope_parameters`).
nlohmann::json llama32Config(bool transformers5) {
    nlohmann::json j = smollm2Config();
    j.erase("rope_parameters");
    const nlohmann::json scaling = {{"factor", 32.0},
                                    {"high_freq_factor", 4.0},
                                    {"low_freq_factor", 1.0},
                                    {"original_max_position_embeddings", 8192},
                                    {"rope_type", "llama3"}};
    j["max_position_embeddings"] = 131072;
    if (transformers5) {
        j["rope_parameters"] = scaling;
        j["rope_parameters"]["rope_theta"] = 500000.0;
    } else {
        j["rope_scaling"] = scaling;
        j["rope_theta"] = 500000.0;
    }
    return j;
}

TEST(ModelConfig, RopeBaseIsReadFromTransformers5RopeParameters) {
    const ModelConfig c = ModelConfig::fromJson(smollm2Config(), "config.json");
    EXPECT_DOUBLE_EQ(c.ropeTheta, 100000.0);
    EXPECT_EQ(c.ropeScaling.type, RopeType::Default);
    EXPECT_EQ(c.headDim, 64);
    EXPECT_TRUE(c.tieWordEmbeddings);
    EXPECT_EQ(c.torchDtype, "float32");
    // rope_parameters' base wins over a top-level one, as in transformers (setdefault).
    nlohmann::json both = smollm2Config();
    both["rope_theta"] = 10000.0;
    EXPECT_DOUBLE_EQ(ModelConfig::fromJson(both, "config.json").ropeTheta, 100000.0);
    // With no RoPE field at all, transformers' default base.
    nlohmann::json none = smollm2Config();
    none.erase("rope_parameters");
    EXPECT_DOUBLE_EQ(ModelConfig::fromJson(none, "config.json").ropeTheta, 10000.0);
}

TEST(ModelConfig, Llama3ScalingReadsTheSameFromEitherTransformersVersion) {
    for (bool transformers5 : {false, true}) {
        SCOPED_TRACE(transformers5 ? "rope_parameters" : "rope_scaling");
        const ModelConfig c = ModelConfig::fromJson(llama32Config(transformers5), "config.json");
        EXPECT_DOUBLE_EQ(c.ropeTheta, 500000.0);
        EXPECT_EQ(c.ropeScaling.type, RopeType::Llama3);
        EXPECT_DOUBLE_EQ(c.ropeScaling.factor, 32.0);
        EXPECT_DOUBLE_EQ(c.ropeScaling.lowFreqFactor, 1.0);
        EXPECT_DOUBLE_EQ(c.ropeScaling.highFreqFactor, 4.0);
        EXPECT_EQ(c.ropeScaling.originalMaxPositionEmbeddings, 8192);
    }
    // Without original_max_position_embeddings transformers takes max_position_embeddings.
    nlohmann::json j = llama32Config(true);
    j["rope_parameters"].erase("original_max_position_embeddings");
    EXPECT_EQ(ModelConfig::fromJson(j, "config.json").ropeScaling.originalMaxPositionEmbeddings, 131072);
}

TEST(ModelConfig, DefaultsFollowEachFamilyAsTransformersSetsThem) {
    nlohmann::json j = smollm2Config();
    for (const char* key : {"head_dim", "max_position_embeddings", "num_key_value_heads"}) j.erase(key);
    ModelConfig llama = ModelConfig::fromJson(j, "config.json");
    EXPECT_EQ(llama.headDim, 64);                 // hidden / heads
    EXPECT_EQ(llama.maxPositionEmbeddings, 2048);  // LlamaConfig's default
    EXPECT_EQ(llama.numKvHeads, 9);               // = num_attention_heads
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["num_attention_heads"] = 32;
    ModelConfig qwen3 = ModelConfig::fromJson(j, "config.json");
    EXPECT_EQ(qwen3.headDim, 128);  // Qwen3Config's default, not hidden / heads
    EXPECT_EQ(qwen3.maxPositionEmbeddings, 32768);
    EXPECT_EQ(qwen3.numKvHeads, 32);
    // attention_bias gives Llama and Qwen3 q/k/v and o_proj biases; Qwen2 has q/k/v ones always.
    j = smollm2Config();
    j["attention_bias"] = true;
    llama = ModelConfig::fromJson(j, "config.json");
    EXPECT_TRUE(llama.attentionBias);
    EXPECT_TRUE(llama.outputBias);
    j["architectures"] = {"Qwen2ForCausalLM"};
    j.erase("attention_bias");
    const ModelConfig qwen2 = ModelConfig::fromJson(j, "config.json");
    EXPECT_TRUE(qwen2.attentionBias);
    EXPECT_FALSE(qwen2.outputBias);
}

TEST(ModelConfig, FieldsThatChangeTheNumbersAndAreNotImplementedAreRefused) {
    auto refused = [](std::function<void(nlohmann::json&)> edit, std::vector<std::string> words) {
        nlohmann::json j = smollm2Config();
        edit(j);
        words.insert(words.begin(), "c.json");
        expectErrorContaining<ConfigError>([&] { ModelConfig::fromJson(j, "c.json"); }, words);
    };
    refused([](auto& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, {"'rope_parameters.rope_type'", "yarn"});
    refused([](auto& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; },
            {"'rope_scaling.rope_type'", "linear"});
    refused([](auto& j) { j["rope_parameters"]["mscale"] = 0.7; }, {"'rope_parameters.mscale'", "rope_theta"});
    refused([](auto& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; },
            {"'rope_parameters.partial_rotary_factor'", "whole head"});
    refused([](auto& j) { j["rope_parameters"]["rope_theta"] = "big"; }, {"'rope_parameters.rope_theta'", "number"});
    refused([](auto& j) { j = llama32Config(true), j["rope_parameters"].erase("factor"); },
            {"'rope_parameters.factor'", "missing"});
    refused([](auto& j) { j["layer_types"] = {"full_attention", "sliding_attention"}; },
            {"'layer_types'", "sliding_attention"});
    refused([](auto& j) { j["quantization_config"] = {{"quant_method", "gptq"}}; }, {"'quantization_config'"});
    refused([](auto& j) { j["mlp_bias"] = true; }, {"'mlp_bias'"});
    refused([](auto& j) { j["architectures"] = {"Qwen2ForCausalLM"}, j["attention_bias"] = false; },
            {"'attention_bias'", "always"});
}

TEST(ModelConfig, ConfigFileThatIsNotJson) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    test::writeTextFile(m + "/config.json", "{\"hidden_size\": ");
    expectErrorContaining<ConfigError>([&] { ModelConfig::load(m); }, {"config.json", "not valid JSON"});
}

TEST(Checkpoint, MissingTensorIsNamedWithItsExpectedShape) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    SafetensorsFile f(m + "/model.safetensors");
    std::vector<std::pair<std::string, torch::Tensor>> kept;
    for (const auto& e : f.entries())
        if (e.name != "model.layers.1.mlp.up_proj.weight") kept.emplace_back(e.name, f.read(e.name));
    writeSafetensors(m + "/model.safetensors", kept);
    expectErrorContaining<TensorError>([&] { Transformer::load(m, torch::kFloat32, torch::kCPU); },
                                       {"missing tensor 'model.layers.1.mlp.up_proj.weight'", "[96, 64]"});
}

TEST(Checkpoint, WrongShapeIsNamed) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    replaceTensor(m, "model.norm.weight", torch::ones({63}));
    expectErrorContaining<TensorError>([&] { Transformer::load(m, torch::kFloat32, torch::kCPU); },
                                       {"'model.norm.weight'", "[63]", "expected [64]"});
}

TEST(Checkpoint, UnexpectedTensorsAreReported) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    SafetensorsFile f(m + "/model.safetensors");
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& e : f.entries()) tensors.emplace_back(e.name, f.read(e.name));
    tensors.emplace_back("model.extra_adapter.weight", torch::ones({2}));
    writeSafetensors(m + "/model.safetensors", tensors);
    LoadReport report;
    Transformer::load(m, torch::kFloat32, torch::kCPU, &report);
    EXPECT_EQ(report.unusedTensors, std::vector<std::string>{"model.extra_adapter.weight"});
}

TEST(Checkpoint, ShardedCheckpointLoadsAndIndexIsChecked) {
    const std::string& sharded = test::tinyModel("qwen2-sharded");
    Checkpoint ck = Checkpoint::open(sharded);
    EXPECT_EQ(ck.weightFiles().size(), 3u);
    EXPECT_TRUE(ck.validate().empty());

    test::TempDir dir;
    const std::string m = copyOf("qwen2-sharded", dir);
    auto index = readJson(m + "/model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";  // wrong shard
    writeJson(m + "/model.safetensors.index.json", index);
    expectErrorContaining<FormatError>([&] { Checkpoint::open(m); }, {"model.norm.weight", "does not contain it"});
}

TEST(Checkpoint, ATensorTheIndexDoesNotListIsAnError) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2-sharded", dir);
    auto index = readJson(m + "/model.safetensors.index.json");
    index["weight_map"].erase("model.norm.weight");
    writeJson(m + "/model.safetensors.index.json", index);
    expectErrorContaining<FormatError>([&] { Checkpoint::open(m); },
                                       {"'model.norm.weight'", "weight_map does not list"});
}

TEST(Checkpoint, IntegerWeightsAreRefusedNotCastToFloat) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    replaceTensor(m, "model.norm.weight", torch::ones({64}, torch::kInt32));
    expectErrorContaining<TensorError>([&] { Transformer::load(m, torch::kFloat32, torch::kCPU); },
                                       {"'model.norm.weight'", "stored as I32", "expected a float type"});
}

TEST(Checkpoint, DirectoryWithoutWeights) {
    test::TempDir dir;
    const std::string m = copyOf("qwen2", dir);
    fs::remove(m + "/model.safetensors");
    expectErrorContaining<FormatError>([&] { Checkpoint::open(m); }, {"no model.safetensors"});
}

}  // namespace
}  // namespace kvscope
