// SPDX-License-Identifier: MIT
// Loading HF checkpoint directories: config.json semantics, shards, and the errors for bad ones.
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/error.h"
#include "support/expect_error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>

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
