// SPDX-License-Identifier: MIT
#pragma once
// Reader for llama.cpp's GGUF files (versions 2 and 3; https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
//   "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata: (string key, u32 type, value)...   tensor table: (string name, u32 dims, u64 ne[dims],
//   u32 ggml type, u64 offset)...   padding to general.alignment (32)   tensor data.
// The whole header is parsed and checked up front against the file's size, as the safetensors
// reader does: every length, count, dimension, type and offset, and that tensors lie inside the data
// section without overlapping. A malformed file is refused with a FormatError naming the file, the
// field and its byte offset; no tensor is read before the header is known to be sound.
#include "core/util/mapped_file.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvscope {

// The ggml tensor types kvscope dequantizes (ggml.h's enum ggml_type values).
enum class GgmlType : std::uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    BF16 = 30,
};

struct GgmlTypeTraits {
    const char* name;        // "Q4_K"
    std::int64_t blockSize;  // elements per block (1 for the float types)
    std::int64_t blockBytes; // bytes per block
};
// The traits of a ggml type id, or nullptr for a type kvscope does not dequantize.
const GgmlTypeTraits* ggmlTypeTraits(std::uint32_t type);
std::string ggmlTypeName(std::uint32_t type);  // "Q4_K", or "type 23" for one kvscope does not know

struct GgufTensorInfo {
    std::string name;               // llama.cpp's: "blk.0.attn_q.weight"
    std::vector<std::int64_t> ne;   // ggml order: ne[0] is the innermost (a row's length)
    GgmlType type = GgmlType::F32;
    std::size_t fileOffset = 0;     // where its bytes start in the file
    std::size_t bytes = 0;

    std::int64_t elements() const;
    std::vector<std::int64_t> rowMajorShape() const;  // ne reversed: [rows, row length], as torch has it
};

class GgufFile {
public:
    explicit GgufFile(const std::string& path);  // maps and validates; throws FormatError

    const std::string& path() const { return file_.path(); }
    // Metadata values as JSON: integers, floats (an f32 widened exactly), booleans, strings, arrays.
    const nlohmann::json& metadata() const { return metadata_; }
    bool has(const std::string& key) const { return metadata_.contains(key); }
    // The value of `key`, FormatError naming file and key where it is missing or not of the kind asked.
    std::string string(const std::string& key) const;
    std::int64_t integer(const std::string& key) const;
    const nlohmann::json& array(const std::string& key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find(const std::string& name) const;
    const std::uint8_t* bytesOf(const GgufTensorInfo& t) const { return file_.data() + t.fileOffset; }

private:
    MappedFile file_;
    nlohmann::json metadata_ = nlohmann::json::object();
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, std::size_t> tensorIndex_;  // name -> position in tensors_
};

// `count` values of a tensor of `type` from its bytes into fp32, as the `gguf` Python package's
// dequantize computes them (transformers loads GGUF files through it): the same operations in the
// same order, so the same floats bit for bit. `count` is a multiple of the type's block size.
void dequantizeToFloat(GgmlType type, const std::uint8_t* bytes, std::int64_t count, float* out);

bool isGgufPath(const std::string& path);  // names a file ending in ".gguf"
// A model given as a GGUF file: a path ending in ".gguf" that is not a directory (a Hugging Face
// folder may be named so). Never throws: a path the system refuses is "not a directory" here, and
// opening it then names it.
bool isGgufFile(const std::string& path);

}  // namespace kvscope
