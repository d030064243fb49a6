// SPDX-License-Identifier: MIT
#include "core/model/config.h"
#include "core/util/file_names.h"

#include "core/util/error.h"
#include "core/util/limits.h"

#include <cmath>
#include <filesystem>
#include <fstream>

namespace kvscope {
namespace {

using nlohmann::json;

json readJsonFile(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ConfigError(path + ": cannot open");
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        throw ConfigError(path + ": not valid JSON (" + e.what() + ")");
    }
}

// Typed field access that names the file and field on failure.
using namespace limits;

class Fields {
public:
    Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

    // Sizes are bounded before anything is allocated from them: a config.json claiming 10^9 layers
    // must be an error, not an hour of building tensor names until memory runs out.
    int64_t requiredInt(const char* key, int64_t most) const {
        if (!j_.contains(key) || j_[key].is_null()) fail(key, "is missing (expected a positive integer)");
        return positiveInt(key, most);
    }
    int64_t optionalInt(const char* key, int64_t fallback, int64_t most) const {
        return (!j_.contains(key) || j_[key].is_null()) ? fallback : positiveInt(key, most);
    }
    double optionalDouble(const char* key, double fallback) const {
        if (!j_.contains(key) || j_[key].is_null()) return fallback;
        if (!j_[key].is_number()) fail(key, "must be a number");
        return j_[key].get<double>();
    }
    // eps, theta, scaling factors: a zero or negative value gives NaN or Inf logits, not an answer.
    double optionalPositive(const char* key, double fallback) const {
        const double v = optionalDouble(key, fallback);
        if (!(v > 0) || !std::isfinite(v))
            fail(key, "must be a positive finite number (is " + (j_.contains(key) ? j_[key].dump() : "missing") + ")");
        return v;
    }
    bool optionalBool(const char* key, bool fallback) const {
        if (!j_.contains(key) || j_[key].is_null()) return fallback;
        if (!j_[key].is_boolean()) fail(key, "must be true or false");
        return j_[key].get<bool>();
    }
    std::string optionalString(const char* key, const std::string& fallback) const {
        if (!j_.contains(key) || j_[key].is_null()) return fallback;
        if (!j_[key].is_string()) fail(key, "must be a string");
        return j_[key].get<std::string>();
    }
    // An id or a list of ids (eos_token_id accepts both).
    std::vector<int64_t> idList(const char* key) const {
        std::vector<int64_t> ids;
        if (!j_.contains(key) || j_[key].is_null()) return ids;
        const json& v = j_[key];
        if (v.is_number_integer()) return {v.get<int64_t>()};
        if (!v.is_array()) fail(key, "must be an integer or a list of integers");
        for (const auto& x : v) {
            if (!x.is_number_integer()) fail(key, "must be an integer or a list of integers");
            ids.push_back(x.get<int64_t>());
        }
        return ids;
    }
    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw ConfigError(source_ + ": field '" + key + "' " + what);
    }

private:
    int64_t positiveInt(const char* key, int64_t most) const {
        const json& v = j_[key];
        const bool ok = v.is_number_unsigned()
                            ? v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= static_cast<uint64_t>(most)
                            : v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= most;
        if (!ok) fail(key, "must be an integer from 1 to " + std::to_string(most) + " (is " + v.dump() + ")");
        return v.get<int64_t>();
    }
    const json& j_;
    std::string source_;
};

Architecture parseArchitecture(const json& j, const Fields& f) {
    if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
        !j["architectures"][0].is_string())
        f.fail("architectures",
               "is missing (expected [\"Qwen2ForCausalLM\"], [\"LlamaForCausalLM\"] or [\"Qwen3ForCausalLM\"])");
    const auto name = j["architectures"][0].get<std::string>();
    if (name == "Qwen2ForCausalLM") return Architecture::Qwen2;
    if (name == "LlamaForCausalLM") return Architecture::Llama;
    if (name == "Qwen3ForCausalLM") return Architecture::Qwen3;
    f.fail("architectures",
           "names '" + name +
               "', which kvscope does not support (expected Qwen2ForCausalLM, LlamaForCausalLM or Qwen3ForCausalLM)");
}

RopeScaling parseRopeScaling(const json& j, const Fields& f) {
    RopeScaling s;
    if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return s;
    const json& r = j["rope_scaling"];
    if (!r.is_object()) f.fail("rope_scaling", "must be null or an object");
    Fields rf(r, "rope_scaling");
    std::string type = rf.optionalString("rope_type", rf.optionalString("type", ""));
    if (type == "default" || type.empty()) return s;
    if (type != "llama3")
        f.fail("rope_scaling", "has rope_type '" + type + "'; kvscope supports none/default and 'llama3'");
    s.type = "llama3";
    s.factor = rf.optionalPositive("factor", 8.0);
    s.lowFreqFactor = rf.optionalPositive("low_freq_factor", 1.0);
    s.highFreqFactor = rf.optionalPositive("high_freq_factor", 4.0);
    s.originalMaxPositionEmbeddings = rf.optionalInt("original_max_position_embeddings", 8192, kMaxPositions);
    return s;
}

void rejectUnsupported(const json& j, const Fields& f, const ModelConfig& c) {
    const std::string act = f.optionalString("hidden_act", "silu");
    if (act != "silu") f.fail("hidden_act", "is '" + act + "'; kvscope implements SwiGLU with 'silu' only");
    if (f.optionalBool("mlp_bias", false)) f.fail("mlp_bias", "is true; kvscope supports MLPs without bias only");
    if (f.optionalBool("use_sliding_window", false))
        f.fail("use_sliding_window", "is true; sliding-window attention is not supported");
    if (c.numHeads % c.numKvHeads != 0)
        f.fail("num_key_value_heads", "(" + std::to_string(c.numKvHeads) + ") must divide num_attention_heads (" +
                                          std::to_string(c.numHeads) + ")");
    if (c.headDim % 2 != 0) f.fail("head_dim", "must be even for rotary embeddings");
}

}  // namespace

std::string architectureName(Architecture arch) {
    switch (arch) {
    case Architecture::Qwen2: return "Qwen2ForCausalLM";
    case Architecture::Llama: return "LlamaForCausalLM";
    case Architecture::Qwen3: return "Qwen3ForCausalLM";
    }
    return "?";
}

ModelConfig ModelConfig::fromJson(const json& j, const std::string& source) {
    if (!j.is_object()) throw ConfigError(source + ": expected a JSON object");
    Fields f(j, source);
    ModelConfig c;
    c.architecture = parseArchitecture(j, f);
    c.hiddenSize = f.requiredInt("hidden_size", kMaxWidth);
    c.numLayers = f.requiredInt("num_hidden_layers", kMaxLayers);
    c.numHeads = f.requiredInt("num_attention_heads", kMaxHeads);
    c.numKvHeads = f.optionalInt("num_key_value_heads", c.numHeads, kMaxHeads);
    c.intermediateSize = f.requiredInt("intermediate_size", kMaxWidth * 8);
    c.vocabSize = f.requiredInt("vocab_size", kMaxVocabulary);
    c.headDim = f.optionalInt("head_dim", std::max<int64_t>(1, c.hiddenSize / c.numHeads), kMaxHeadDim);
    c.maxPositionEmbeddings = f.optionalInt("max_position_embeddings", 32768, kMaxPositions);
    c.rmsNormEps = f.optionalPositive("rms_norm_eps", 1e-6);
    c.ropeTheta = f.optionalPositive("rope_theta", 10000.0);
    c.ropeScaling = parseRopeScaling(j, f);
    c.tieWordEmbeddings = f.optionalBool("tie_word_embeddings", false);
    // Qwen2's attention always has q/k/v bias (the modeling code hard-codes it); Llama and Qwen3
    // follow `attention_bias`, default false.
    c.attentionBias = c.architecture == Architecture::Qwen2 ? true : f.optionalBool("attention_bias", false);
    c.qkNorm = c.architecture == Architecture::Qwen3;
    auto bos = f.idList("bos_token_id");
    if (!bos.empty()) c.bosTokenId = bos.front();
    c.eosTokenIds = f.idList("eos_token_id");
    c.torchDtype = f.optionalString("torch_dtype", f.optionalString("dtype", "float32"));
    if (c.hiddenSize % c.numHeads != 0 && !j.contains("head_dim"))
        f.fail("hidden_size", "is not divisible by num_attention_heads and no head_dim is given");
    rejectUnsupported(j, f, c);
    return c;
}

ModelConfig ModelConfig::load(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string configPath = (fs::path(dir) / "config.json").string();
    if (!pathExists(configPath))
        throw ConfigError(configPath + ": not found (is '" + dir + "' a Hugging Face model directory?)");
    ModelConfig c = fromJson(readJsonFile(configPath), configPath);
    const std::string genPath = (fs::path(dir) / "generation_config.json").string();
    if (pathExists(genPath)) {
        json g = readJsonFile(genPath);
        if (!g.is_object()) throw ConfigError(genPath + ": expected a JSON object");
        for (int64_t id : Fields(g, genPath).idList("eos_token_id"))
            if (std::find(c.eosTokenIds.begin(), c.eosTokenIds.end(), id) == c.eosTokenIds.end())
                c.eosTokenIds.push_back(id);
    }
    return c;
}

json ModelConfig::toJson() const {
    json j = {
        {"architectures", {architectureName(architecture)}},
        {"model_type", architecture == Architecture::Qwen2   ? "qwen2"
                       : architecture == Architecture::Llama ? "llama"
                                                             : "qwen3"},
        {"hidden_size", hiddenSize},
        {"num_hidden_layers", numLayers},
        {"num_attention_heads", numHeads},
        {"num_key_value_heads", numKvHeads},
        {"head_dim", headDim},
        {"intermediate_size", intermediateSize},
        {"vocab_size", vocabSize},
        {"max_position_embeddings", maxPositionEmbeddings},
        {"rms_norm_eps", rmsNormEps},
        {"rope_theta", ropeTheta},
        {"tie_word_embeddings", tieWordEmbeddings},
        {"hidden_act", "silu"},
        {"torch_dtype", torchDtype},
    };
    if (architecture != Architecture::Qwen2) j["attention_bias"] = attentionBias;
    if (ropeScaling.type == "llama3")
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", ropeScaling.factor},
                             {"low_freq_factor", ropeScaling.lowFreqFactor},
                             {"high_freq_factor", ropeScaling.highFreqFactor},
                             {"original_max_position_embeddings", ropeScaling.originalMaxPositionEmbeddings}};
    else
        j["rope_scaling"] = nullptr;
    if (bosTokenId) j["bos_token_id"] = *bosTokenId;
    if (eosTokenIds.size() == 1)
        j["eos_token_id"] = eosTokenIds.front();
    else if (!eosTokenIds.empty())
        j["eos_token_id"] = eosTokenIds;
    return j;
}

}  // namespace kvscope
