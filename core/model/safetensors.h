// SPDX-License-Identifier: MIT
#pragma once
// Reader and writer for the safetensors format (https://huggingface.co/docs/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data bytes]
// The header maps tensor name -> {dtype, shape, data_offsets:[begin,end)} relative to the data
// section, plus an optional "__metadata__" string->string map. The reader memory-maps the file and
// validates the whole header up front (sizes, dtypes, offsets in range and not overlapping, bytes ==
// dtype size x element count) so a bad file is rejected with a FormatError before any tensor is read.
#include "core/util/mapped_file.h"

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

struct SafetensorsEntry {
    std::string name;
    std::string dtype;             // as written in the file: "F32", "BF16", ...
    std::vector<int64_t> shape;
    std::size_t begin = 0;         // byte offsets into the data section, [begin, end)
    std::size_t end = 0;
    std::size_t fileOffset = 0;    // where the data starts in the file (8 + header + begin)
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);  // maps and validates; throws FormatError

    const std::string& path() const { return file_.path(); }
    const std::vector<SafetensorsEntry>& entries() const { return entries_; }
    const SafetensorsEntry* find(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // A fresh, owned CPU tensor converted to `dtype` (the map is not referenced afterwards).
    torch::Tensor read(const std::string& name, torch::ScalarType dtype) const;
    // Same, keeping the stored dtype.
    torch::Tensor read(const std::string& name) const;
    // Into `out`, a contiguous CPU tensor of the stored shape in any float dtype, converted on the way
    // in pieces of a few MiB: no whole-tensor temporary (Transformer::load says why).
    void readInto(const std::string& name, torch::Tensor& out) const;

private:
    void parseHeader();
    const SafetensorsEntry& entryNamed(const std::string& name) const;  // TensorError where absent
    torch::Tensor readStored(const SafetensorsEntry& entry) const;

    MappedFile file_;
    std::size_t dataStart_ = 0;
    std::vector<SafetensorsEntry> entries_;  // sorted by name
    std::map<std::string, std::string> metadata_;
};

// Writes tensors (any device; copied to CPU, contiguous) atomically: a temporary file renamed into
// place, so a crash never leaves a half-written file at `path`.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// "F32" <-> torch dtype. Throws FormatError for a name kvscope cannot map.
torch::ScalarType scalarTypeFromSafetensors(const std::string& dtype);
std::string safetensorsDtypeName(torch::ScalarType type);

}  // namespace kvscope
