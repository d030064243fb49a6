// SPDX-License-Identifier: MIT
#include "core/model/config.h"
#include "core/util/file_names.h"

#include "core/util/error.h"
#include "core/util/limits.h"

#include <algorithm>
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
    // `prefix` is the path of a nested object ("rope_parameters."), so errors name the whole field.
    Fields(const json& j, const std::string& source, std::string prefix = "")
        : j_(j), source_(source), prefix_(std::move(prefix)) {}

    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

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
        throw ConfigError(source_ + ": field '" + prefix_ + key + "' " + what);
    }
    const std::string& source() const { return source_; }

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
    std::string prefix_;
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

// What transformers 5 does with the RoPE fields (modeling_rope_utils.py, convert_rope_params_to_dict
// and standardize_rope_params): the parameters are `rope_scaling` (4.x's name) when that is set, else
// `rope_parameters` (5.x's); the base is their rope_theta, else the top-level rope_theta, else
// 10000; llama3's original_max_position_embeddings is a top-level one when present, else theirs, else
// max_position_embeddings. Keys kvscope does not implement are refused, not ignored.
std::string joined(const std::vector<std::string>& words) {
    std::string list;
    for (const auto& w : words) list += (list.empty() ? "" : ", ") + w;
    return list;
}

struct RopeFields {
    const json* object = nullptr;  // null: neither field is set
    std::string name;              // "rope_scaling" or "rope_parameters"
};

RopeFields ropeFieldsOf(const json& j, const Fields& f) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
        if (!f.has(key)) continue;
        const json& r = j[key];
        if (!r.is_object()) f.fail(key, "must be null or an object");
        if (!r.empty()) return {&r, key};  // an empty object counts as unset, as in transformers
    }
    return {};
}

void parseRope(const json& j, const Fields& f, ModelConfig& c) {
    c.ropeTheta = f.optionalPositive("rope_theta", 10000.0);
    const RopeFields rope = ropeFieldsOf(j, f);
    if (!rope.object) return;
    const Fields rf(*rope.object, f.source(), rope.name + ".");
    c.ropeTheta = rf.optionalPositive("rope_theta", c.ropeTheta);
    const std::string type = rf.optionalString("rope_type", rf.optionalString("type", "default"));
    if (type != "default" && type != "llama3")
        rf.fail("rope_type", "is '" + type + "'; kvscope implements the rope types 'default' and 'llama3' only");
    if (rf.has("partial_rotary_factor") && rf.optionalPositive("partial_rotary_factor", 1.0) != 1.0)
        rf.fail("partial_rotary_factor", "is not 1; kvscope rotates the whole head dimension only");
    std::vector<std::string> known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    if (type == "llama3") {
        known.insert(known.end(),
                     {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
        RopeScaling& s = c.ropeScaling;
        s.type = RopeType::Llama3;
        for (const char* key : {"factor", "low_freq_factor", "high_freq_factor"})
            if (!rf.has(key))
                rf.fail(key, "is missing (rope_type 'llama3' needs factor, low_freq_factor and high_freq_factor)");
        s.factor = rf.optionalPositive("factor", 1.0);
        s.lowFreqFactor = rf.optionalPositive("low_freq_factor", 1.0);
        s.highFreqFactor = rf.optionalPositive("high_freq_factor", 1.0);
        if (!(s.highFreqFactor > s.lowFreqFactor))
            rf.fail("high_freq_factor", "must be greater than low_freq_factor (the blend divides by their difference)");
        s.originalMaxPositionEmbeddings = f.optionalInt(
            "original_max_position_embeddings",
            rf.optionalInt("original_max_position_embeddings", c.maxPositionEmbeddings, kMaxPositions), kMaxPositions);
    }
    for (auto it = rope.object->begin(); it != rope.object->end(); ++it)
        if (std::find(known.begin(), known.end(), it.key()) == known.end())
            rf.fail(it.key(),
                    "is not one kvscope implements for rope_type '" + type + "' (it reads " + joined(known) + ")");
}

// Defaults that differ by family, as the pinned transformers' config classes set them.
int64_t defaultKvHeads(Architecture arch, int64_t numHeads) { return arch == Architecture::Llama ? numHeads : 32; }
int64_t defaultMaxPositions(Architecture arch) { return arch == Architecture::Llama ? 2048 : 32768; }
int64_t defaultHeadDim(Architecture arch, int64_t hidden, int64_t heads) {
    return arch == Architecture::Qwen3 ? 128 : std::max<int64_t>(1, hidden / heads);
}

// Qwen2's attention always has q/k/v biases and no o_proj bias (the modeling code hard-codes them and
// ignores `attention_bias`); Llama's and Qwen3's q/k/v/o projections all follow `attention_bias`.
void parseAttentionBias(const Fields& f, ModelConfig& c) {
    if (c.architecture == Architecture::Qwen2) {
        if (!f.optionalBool("attention_bias", true))
            f.fail("attention_bias", "is false, but Qwen2ForCausalLM's q/k/v projections always have biases");
        c.attentionBias = true;
        c.outputBias = false;
        return;
    }
    c.attentionBias = c.outputBias = f.optionalBool("attention_bias", false);
}

void rejectSlidingWindow(const json& j, const Fields& f) {
    if (f.optionalBool("use_sliding_window", false))
        f.fail("use_sliding_window", "is true; sliding-window attention is not supported");
    if (!f.has("layer_types")) return;
    if (!j["layer_types"].is_array()) f.fail("layer_types", "must be a list of strings");
    for (const auto& t : j["layer_types"])
        if (t != "full_attention")
            f.fail("layer_types", "has " + t.dump() + "; kvscope implements full attention in every layer only");
}

void rejectUnsupported(const json& j, const Fields& f, const ModelConfig& c) {
    const std::string act = f.optionalString("hidden_act", "silu");
    if (act != "silu") f.fail("hidden_act", "is '" + act + "'; kvscope implements SwiGLU with 'silu' only");
    if (f.optionalBool("mlp_bias", false)) f.fail("mlp_bias", "is true; kvscope supports MLPs without bias only");
    rejectSlidingWindow(j, f);
    if (f.has("quantization_config"))
        f.fail("quantization_config", "is set; kvscope reads unquantized weights only (float32, bfloat16 or float16)");
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
    c.numKvHeads = f.optionalInt("num_key_value_heads", defaultKvHeads(c.architecture, c.numHeads), kMaxHeads);
    c.intermediateSize = f.requiredInt("intermediate_size", kMaxWidth * 8);
    c.vocabSize = f.requiredInt("vocab_size", kMaxVocabulary);
    c.headDim = f.optionalInt("head_dim", defaultHeadDim(c.architecture, c.hiddenSize, c.numHeads), kMaxHeadDim);
    c.maxPositionEmbeddings =
        f.optionalInt("max_position_embeddings", defaultMaxPositions(c.architecture), kMaxPositions);
    c.rmsNormEps = f.optionalPositive("rms_norm_eps", 1e-6);
    parseRope(j, f, c);
    c.tieWordEmbeddings = f.optionalBool("tie_word_embeddings", false);
    parseAttentionBias(f, c);
    c.qkNorm = c.architecture == Architecture::Qwen3;
    auto bos = f.idList("bos_token_id");
    if (!bos.empty()) c.bosTokenId = bos.front();
    c.eosTokenIds = f.idList("eos_token_id");
    c.torchDtype = f.optionalString("dtype", f.optionalString("torch_dtype", "float32"));
    if (c.hiddenSize % c.numHeads != 0 && !f.has("head_dim") && c.architecture != Architecture::Qwen3)
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
    if (ropeScaling.type == RopeType::Llama3)
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
