// SPDX-License-Identifier: MIT
#include "core/model/checkpoint.h"
#include "core/model/gguf_model.h"
#include "core/util/file_names.h"

#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace kvscope {
namespace fs = std::filesystem;

std::vector<ExpectedTensor> expectedTensors(const ModelConfig& c) {
    const int64_t H = c.hiddenSize, D = c.headDim, I = c.intermediateSize;
    const int64_t qDim = c.numHeads * D, kvDim = c.numKvHeads * D;
    std::vector<ExpectedTensor> out = {{"model.embed_tokens.weight", {c.vocabSize, H}}};
    for (int64_t l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        out.push_back({p + "input_layernorm.weight", {H}});
        out.push_back({p + "self_attn.q_proj.weight", {qDim, H}});
        out.push_back({p + "self_attn.k_proj.weight", {kvDim, H}});
        out.push_back({p + "self_attn.v_proj.weight", {kvDim, H}});
        if (c.attentionBias) {
            out.push_back({p + "self_attn.q_proj.bias", {qDim}});
            out.push_back({p + "self_attn.k_proj.bias", {kvDim}});
            out.push_back({p + "self_attn.v_proj.bias", {kvDim}});
        }
        if (c.qkNorm) {
            out.push_back({p + "self_attn.q_norm.weight", {D}});
            out.push_back({p + "self_attn.k_norm.weight", {D}});
        }
        out.push_back({p + "self_attn.o_proj.weight", {H, qDim}});
        if (c.outputBias) out.push_back({p + "self_attn.o_proj.bias", {H}});
        out.push_back({p + "post_attention_layernorm.weight", {H}});
        out.push_back({p + "mlp.gate_proj.weight", {I, H}});
        out.push_back({p + "mlp.up_proj.weight", {I, H}});
        out.push_back({p + "mlp.down_proj.weight", {H, I}});
    }
    out.push_back({"model.norm.weight", {H}});
    if (!c.tieWordEmbeddings) out.push_back({"lm_head.weight", {c.vocabSize, H}});
    return out;
}

namespace {

nlohmann::json readIndex(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw FormatError(path + ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(path + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw FormatError(path + ": expected an object with a 'weight_map' object");
    return j;
}

std::string shapeText(const std::vector<int64_t>& shape) {
    std::ostringstream s;
    s << '[';
    for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << ']';
    return s.str();
}

}  // namespace

Checkpoint Checkpoint::openGguf(const std::string& path) {
    Checkpoint ck;
    ck.dir_ = path;
    ck.gguf_ = std::make_shared<const GgufFile>(path);
    ck.config_ = ggufModelConfig(*ck.gguf_);
    ck.ggufTensors_ = ggufTensorsByHfName(*ck.gguf_, &ck.ggufUnmapped_);
    return ck;
}

Checkpoint Checkpoint::open(const std::string& dir) {
    if (isGgufFile(dir)) return openGguf(dir);
    Checkpoint ck;
    ck.dir_ = dir;
    ck.config_ = ModelConfig::load(dir);

    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::vector<std::string> shardNames;
    std::map<std::string, std::string> weightMap;  // tensor -> shard file name
    if (pathExists(index)) {
        auto j = readIndex(index.string());
        std::set<std::string> seen;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw FormatError(index.string() + ": weight_map['" + it.key() + "'] is not a file name");
            const auto shard = it.value().get<std::string>();
            if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
                throw FormatError(index.string() + ": shard name '" + shard + "' must be a plain file name");
            weightMap[it.key()] = shard;
            if (seen.insert(shard).second) shardNames.push_back(shard);
        }
    } else if (pathExists(single)) {
        shardNames.push_back("model.safetensors");
    } else {
        throw FormatError(dir + ": no model.safetensors or model.safetensors.index.json found");
    }

    std::map<std::string, const SafetensorsFile*> byShard;
    for (const auto& shard : shardNames) {
        ck.files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard).string()));
        byShard[shard] = ck.files_.back().get();
        for (const auto& e : ck.files_.back()->entries()) {
            if (ck.where_.count(e.name))
                throw FormatError(ck.files_.back()->path() + ": tensor '" + e.name + "' also appears in " +
                                  ck.where_[e.name]->path());
            ck.where_[e.name] = ck.files_.back().get();
        }
    }
    for (const auto& [name, shard] : weightMap) {
        auto it = ck.where_.find(name);
        if (it == ck.where_.end() || it->second != byShard[shard])
            throw FormatError(index.string() + ": weight_map says '" + name + "' is in " + shard +
                              ", but that shard does not contain it");
    }
    if (!weightMap.empty())  // the index is the list of record: a tensor it does not name is not used silently
        for (const auto& [name, file] : ck.where_)
            if (!weightMap.count(name))
                throw FormatError(file->path() + ": holds tensor '" + name + "', which " + index.string() +
                                  "'s weight_map does not list");
    return ck;
}

std::vector<std::string> Checkpoint::weightFiles() const {
    if (gguf_) return {gguf_->path()};
    std::vector<std::string> out;
    for (const auto& f : files_) out.push_back(f->path());
    return out;
}

const SafetensorsFile& Checkpoint::fileHolding(const std::string& name) const {
    auto it = where_.find(name);
    if (it == where_.end()) throw TensorError(dir_ + ": checkpoint has no tensor '" + name + "'");
    return *it->second;
}

const GgufTensorInfo& Checkpoint::ggufTensor(const std::string& name) const {
    const auto it = ggufTensors_.find(name);
    if (it == ggufTensors_.end()) throw TensorError(dir_ + ": GGUF file has no tensor for '" + name + "'");
    return *it->second;
}

std::vector<int64_t> Checkpoint::shape(const std::string& name) const {
    if (gguf_) return ggufTensor(name).rowMajorShape();
    return fileHolding(name).find(name)->shape;
}

std::optional<std::size_t> Checkpoint::fileOffsetAsStored(const std::string& name, torch::ScalarType dtype) const {
    if (gguf_) return std::nullopt;  // dequantized (transformers copies even an F32 tensor out of the file)
    const SafetensorsEntry& e = *fileHolding(name).find(name);
    if (scalarTypeFromSafetensors(e.dtype) != dtype) return std::nullopt;
    return e.fileOffset;
}

torch::Tensor Checkpoint::read(const std::string& name, torch::ScalarType dtype) const {
    if (gguf_) return readGgufTensor(*gguf_, ggufTensor(name), config_).to(dtype);
    return fileHolding(name).read(name, dtype);
}

void Checkpoint::readInto(const std::string& name, torch::Tensor& out) const {
    if (gguf_) {
        // Dequantized to fp32 and then rounded to the run's dtype, as transformers does (`.to(dtype)`
        // of the fp32 array): one rounding, the same bits.
        out.copy_(readGgufTensor(*gguf_, ggufTensor(name), config_));
        return;
    }
    fileHolding(name).readInto(name, out);
}

std::vector<std::string> Checkpoint::validate() const {
    std::vector<std::string> problems;
    std::set<std::string> used;
    for (const auto& want : expectedTensors(config_)) {
        used.insert(want.name);
        if (gguf_) {
            const auto g = ggufTensors_.find(want.name);
            if (g == ggufTensors_.end())
                problems.push_back("missing tensor for '" + want.name + "' (expected shape " + shapeText(want.shape) +
                                   ")");
            else if (g->second->rowMajorShape() != want.shape)
                problems.push_back("tensor '" + g->second->name + "' (" + want.name + ") has shape " +
                                   shapeText(g->second->rowMajorShape()) + ", expected " + shapeText(want.shape) +
                                   " from the metadata");
            continue;
        }
        auto it = where_.find(want.name);
        if (it == where_.end()) {
            problems.push_back("missing tensor '" + want.name + "' (expected shape " + shapeText(want.shape) + ")");
            continue;
        }
        const SafetensorsEntry& have = *it->second->find(want.name);
        if (have.shape != want.shape)
            problems.push_back(it->second->path() + ": tensor '" + want.name + "' has shape " + shapeText(have.shape) +
                               ", expected " + shapeText(want.shape) + " from config.json");
        // Every weight kvscope reads is a float; integer or boolean data cast to float would run and
        // give garbage (a quantised checkpoint's packed ints, say) instead of an error.
        static const std::set<std::string> floats = {"F64", "F32", "F16", "BF16"};
        if (!floats.count(have.dtype))
            problems.push_back(it->second->path() + ": tensor '" + want.name + "' is stored as " + have.dtype +
                               ", expected a float type (F32, F16, BF16 or F64)");
    }
    if (!problems.empty()) {
        std::string msg =
            dir_ + ": checkpoint does not match " + (gguf_ ? "its metadata: " : "config.json: ") + problems.front();
        if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more problems)";
        throw TensorError(msg);
    }
    std::vector<std::string> unused = ggufUnmapped_;
    for (const auto& [name, file] : where_)
        if (!used.count(name)) unused.push_back(name);
    for (const auto& [name, tensor] : ggufTensors_)
        if (!used.count(name)) unused.push_back(tensor->name);
    return unused;
}

}  // namespace kvscope
