// SPDX-License-Identifier: MIT
#pragma once
// A llama.cpp GGUF file read as transformers' GGUF loader reads it (`from_pretrained(dir,
// gguf_file=...)`, whose llama, qwen2 and qwen3 files go through modeling_gguf_pytorch_utils):
// the config from the metadata with the model family's defaults, each tensor under its Hugging Face
// name, dequantized to fp32 (gguf.h), and llama's query/key rows put back in Hugging Face order
// (llama.cpp's converter interleaves the two rotary halves of each head; qwen2 and qwen3 files are
// stored unpermuted). What transformers would read differently from llama.cpp (RoPE frequency
// factors, rope scaling keys, Mistral files under the llama architecture, mixtures of experts) is
// refused naming the key or tensor.
#include "core/model/config.h"
#include "core/model/gguf.h"

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace kvscope {

ModelConfig ggufModelConfig(const GgufFile& file);  // ConfigError naming the file and key

// Every tensor of the file with a Hugging Face name; `unused` receives those without one.
std::map<std::string, const GgufTensorInfo*> ggufTensorsByHfName(const GgufFile& file,
                                                                 std::vector<std::string>* unused = nullptr);

// The tensor as transformers loads it, in fp32: [rows, row length] (HF order), dequantized, Q/K rows
// of a llama file un-permuted with `config`'s head counts.
torch::Tensor readGgufTensor(const GgufFile& file, const GgufTensorInfo& tensor, const ModelConfig& config);

}  // namespace kvscope
