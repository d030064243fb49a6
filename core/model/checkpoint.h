// SPDX-License-Identifier: MIT
#pragma once
// A checkpoint on disk: a Hugging Face directory (config, and weights from either
// `model.safetensors` or a sharded `model.safetensors.index.json` + shards), or a llama.cpp GGUF file
// read as transformers reads one (gguf_model.h). Tensors are read on demand from the memory-mapped
// files, so loading converts (or dequantizes) straight into the compute dtype.
#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/safetensors.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvscope {

struct ExpectedTensor {
    std::string name;
    std::vector<int64_t> shape;
};

// Every tensor a model of this config must have, with its shape, in forward order.
std::vector<ExpectedTensor> expectedTensors(const ModelConfig& config);

class Checkpoint {
public:
    // DIR, or FILE.gguf. Throws FormatError / ConfigError.
    static Checkpoint open(const std::string& path);

    const std::string& dir() const { return dir_; }  // the directory, or the GGUF file
    const ModelConfig& config() const { return config_; }
    std::vector<std::string> weightFiles() const;  // absolute paths, in shard order

    bool has(const std::string& name) const { return where_.count(name) != 0 || ggufTensors_.count(name) != 0; }
    std::vector<int64_t> shape(const std::string& name) const;  // as torch has it (HF order)
    // Where `name`'s bytes sit in its file when they are stored in `dtype` as they are (nothing to
    // convert); none for a converted or dequantized tensor.
    std::optional<std::size_t> fileOffsetAsStored(const std::string& name, torch::ScalarType dtype) const;
    torch::Tensor read(const std::string& name, torch::ScalarType dtype) const;
    void readInto(const std::string& name, torch::Tensor& out) const;  // SafetensorsFile::readInto

    // Checks that every expected tensor exists with the expected shape; throws TensorError listing
    // what is missing or misshapen. Returns the names of tensors the model does not use.
    std::vector<std::string> validate() const;

private:
    std::string dir_;
    ModelConfig config_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const SafetensorsFile*> where_;  // tensor name -> the file that holds it
    std::shared_ptr<const GgufFile> gguf_;                 // a GGUF checkpoint: its file and tensors
    std::map<std::string, const GgufTensorInfo*> ggufTensors_;
    std::vector<std::string> ggufUnmapped_;                // its tensors without a Hugging Face name

    static Checkpoint openGguf(const std::string& path);
    const SafetensorsFile& fileHolding(const std::string& name) const;  // TensorError where none does
    const GgufTensorInfo& ggufTensor(const std::string& name) const;    // TensorError where absent
};

}  // namespace kvscope
