// SPDX-License-Identifier: MIT
#pragma once
// A Hugging Face checkpoint directory on disk: config, and weights from either `model.safetensors`
// or a sharded `model.safetensors.index.json` + shards. Tensors are read on demand from the
// memory-mapped files, so loading converts straight into the compute dtype.
#include "core/model/config.h"
#include "core/model/safetensors.h"

#include <map>
#include <memory>
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
    static Checkpoint open(const std::string& dir);  // throws FormatError / ConfigError

    const std::string& dir() const { return dir_; }
    const ModelConfig& config() const { return config_; }
    std::vector<std::string> weightFiles() const;  // absolute paths, in shard order

    bool has(const std::string& name) const { return where_.count(name) != 0; }
    const SafetensorsEntry& entry(const std::string& name) const;
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

    const SafetensorsFile& fileHolding(const std::string& name) const;  // TensorError where none does
};

}  // namespace kvscope
