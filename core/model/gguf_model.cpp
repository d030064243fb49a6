// SPDX-License-Identifier: MIT
#include "core/model/gguf_model.h"

#include "core/util/error.h"

#include <algorithm>
#include <optional>
#include <set>

namespace kvscope {

namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const GgufFile& f, const std::string& what) { throw ConfigError(f.path() + ": " + what); }

// transformers' GGUF_CONFIG_MAPPING for the three families: metadata key (after "ARCH.") -> config.json key.
const std::vector<std::pair<std::string, std::string>>& configKeys() {
    static const std::vector<std::pair<std::string, std::string>> keys = {
        {"context_length", "max_position_embeddings"},
        {"block_count", "num_hidden_layers"},
        {"feed_forward_length", "intermediate_size"},
        {"embedding_length", "hidden_size"},
        {"rope.freq_base", "rope_theta"},
        {"attention.head_count", "num_attention_heads"},
        {"attention.head_count_kv", "num_key_value_heads"},
        {"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
        {"vocab_size", "vocab_size"},
    };
    return keys;
}

std::string architectureClass(const GgufFile& f, const std::string& arch) {
    if (arch == "llama") return "LlamaForCausalLM";
    if (arch == "qwen2") return "Qwen2ForCausalLM";
    if (arch == "qwen3") return "Qwen3ForCausalLM";
    refuse(f, "GGUF metadata 'general.architecture' is '" + arch + "' (kvscope reads llama, qwen2 and qwen3 files)");
}

// What llama.cpp applies and transformers' loader would silently drop: refused rather than run as
// another model.
void refuseWhatTransformersIgnores(const GgufFile& f, const std::string& arch) {
    for (const auto& [key, value] : f.metadata().items()) {
        if (key.rfind(arch + ".rope.scaling.", 0) == 0 && !(key == arch + ".rope.scaling.type" && value == "none"))
            refuse(f, "GGUF metadata '" + key +
                          "': RoPE scaling, which transformers' GGUF loader does not read "
                          "(kvscope reads GGUF files of unscaled RoPE only)");
        if (key == arch + ".expert_count" && value.is_number() && value.get<double>() > 0)
            refuse(f, "GGUF metadata '" + key + "': a mixture of experts, which kvscope does not run");
    }
    for (const auto& t : f.tensors()) {
        if (t.name == "rope_freqs.weight")
            refuse(f,
                   "GGUF tensor 'rope_freqs.weight': llama.cpp's RoPE frequency factors (Llama 3.1-style "
                   "scaling), which transformers' GGUF loader drops; kvscope will not run the model without them");
        const bool bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
        if (arch == "llama" && bias)
            refuse(f, "GGUF tensor '" + t.name + "': a llama file with biases, which transformers' GGUF loader drops");
    }
}

std::optional<std::string> hfNameOf(const std::string& name) {
    static const std::vector<std::pair<std::string, std::string>> global = {
        {"token_embd.weight", "model.embed_tokens.weight"},
        {"output_norm.weight", "model.norm.weight"},
        {"output.weight", "lm_head.weight"},
    };
    for (const auto& [gguf, hf] : global)
        if (name == gguf) return hf;
    static const std::vector<std::pair<std::string, std::string>> perLayer = {
        {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
        {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
        {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},
    };
    if (name.rfind("blk.", 0) != 0) return std::nullopt;
    const auto dot = name.find('.', 4);
    if (dot == std::string::npos || dot == 4) return std::nullopt;
    const std::string layer = name.substr(4, dot - 4);
    if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    const std::string rest = name.substr(dot + 1);
    for (const char* kind : {".weight", ".bias"})
        for (const auto& [gguf, hf] : perLayer)
            if (rest == gguf + kind) return "model.layers." + layer + "." + hf + kind;
    return std::nullopt;
}

}  // namespace

ModelConfig ggufModelConfig(const GgufFile& f) {
    const std::string arch = f.string("general.architecture");
    json c = {{"architectures", {architectureClass(f, arch)}}, {"model_type", arch}};
    refuseWhatTransformersIgnores(f, arch);
    for (const auto& [key, hfKey] : configKeys())
        if (f.has(arch + "." + key)) c[hfKey] = f.metadata()[arch + "." + key];
    if (arch == "llama" && f.has("llama.rope.dimension_count"))
        c["head_dim"] = f.metadata()["llama.rope.dimension_count"];
    if (!c.contains("vocab_size") && f.has("tokenizer.ggml.tokens"))
        c["vocab_size"] = f.array("tokenizer.ggml.tokens").size();
    c["tie_word_embeddings"] = f.find("output.weight") == nullptr;
    if (f.has("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = f.metadata()["tokenizer.ggml.bos_token_id"];
    if (f.has("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = f.metadata()["tokenizer.ggml.eos_token_id"];
    return ModelConfig::fromJson(c, f.path() + " (GGUF metadata)");
}

std::map<std::string, const GgufTensorInfo*> ggufTensorsByHfName(const GgufFile& f, std::vector<std::string>* unused) {
    std::map<std::string, const GgufTensorInfo*> out;
    for (const auto& t : f.tensors()) {
        if (const auto hf = hfNameOf(t.name))
            out[*hf] = &t;
        else if (unused)
            unused->push_back(t.name);
    }
    return out;
}

torch::Tensor readGgufTensor(const GgufFile& f, const GgufTensorInfo& t, const ModelConfig& config) {
    const auto shape = t.rowMajorShape();
    torch::Tensor out = torch::empty(shape, torch::kFloat32);
    dequantizeToFloat(t.type, f.bytesOf(t), t.elements(), out.data_ptr<float>());
    const bool query = t.name.find(".attn_q.") != std::string::npos;
    const bool key = t.name.find(".attn_k.") != std::string::npos;
    if (config.architecture != Architecture::Llama || !(query || key)) return out;
    // llama.cpp's converter stores each head's rows as (half 0 row i, half 1 row i) pairs; transformers
    // (LlamaTensorProcessor) swaps them back: [heads, dim, 2, ...] -> [heads, 2, dim, ...].
    const int64_t heads = query ? config.numHeads : config.numKvHeads;
    if (heads <= 0 || shape[0] % (2 * heads) != 0)
        throw TensorError(f.path() + ": GGUF tensor '" + t.name + "' has " + std::to_string(shape[0]) +
                          " rows, not a whole number of " + std::to_string(heads) + " heads of two rotary halves");
    std::vector<int64_t> grouped = {heads, shape[0] / heads / 2, 2};
    grouped.insert(grouped.end(), shape.begin() + 1, shape.end());
    return out.reshape(grouped).transpose(1, 2).contiguous().reshape(shape);
}

}  // namespace kvscope
