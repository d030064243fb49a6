// SPDX-License-Identifier: MIT
#include "core/model/safetensors.h"

#include "core/util/atomic_file.h"
#include "core/util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace kvscope {
namespace {

constexpr std::size_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's own limit

struct DtypeRow {
    const char* name;
    torch::ScalarType type;
    std::size_t bytes;
};
constexpr DtypeRow kDtypes[] = {
    {"F64", torch::kFloat64, 8},   {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},     {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeRow* findDtype(const std::string& name) {
    for (const auto& row : kDtypes)
        if (name == row.name) return &row;
    return nullptr;
}

std::uint64_t readLittleEndian64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

SafetensorsEntry parseEntry(const std::string& path, const std::string& name, const nlohmann::json& j,
                            std::size_t dataBytes) {
    auto fail = [&](const std::string& what) { throw FormatError(path + ": tensor '" + name + "': " + what); };
    if (!j.is_object()) fail("header entry is not a JSON object");
    SafetensorsEntry e;
    e.name = name;
    if (!j.contains("dtype") || !j["dtype"].is_string()) fail("missing string field 'dtype'");
    e.dtype = j["dtype"].get<std::string>();
    const DtypeRow* row = findDtype(e.dtype);
    if (!row) fail("unsupported dtype '" + e.dtype + "' (expected F64/F32/F16/BF16/I64/I32/I16/I8/U8/BOOL)");
    if (!j.contains("shape") || !j["shape"].is_array()) fail("missing array field 'shape'");
    std::size_t elements = 1;
    for (const auto& d : j["shape"]) {
        if (!d.is_number_unsigned()) fail("shape entries must be non-negative integers");
        auto dim = d.get<std::uint64_t>();
        if (dim > (1ull << 40) || (dim && elements > (1ull << 50) / dim)) fail("shape is implausibly large");
        e.shape.push_back(static_cast<int64_t>(dim));
        elements *= static_cast<std::size_t>(dim);
    }
    const auto& off = j.contains("data_offsets") ? j["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        fail("'data_offsets' must be [begin, end] with non-negative integers");
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.begin > e.end) fail("data_offsets begin > end");
    if (e.end > dataBytes)
        fail("data_offsets end " + std::to_string(e.end) + " is past the data section (" + std::to_string(dataBytes) +
             " bytes; file truncated?)");
    if (e.end - e.begin != elements * row->bytes)
        fail("byte span " + std::to_string(e.end - e.begin) + " does not match dtype " + e.dtype + " x " +
             std::to_string(elements) + " elements = " + std::to_string(elements * row->bytes));
    return e;
}

}  // namespace

torch::ScalarType scalarTypeFromSafetensors(const std::string& dtype) {
    const DtypeRow* row = findDtype(dtype);
    if (!row) throw FormatError("unsupported safetensors dtype '" + dtype + "'");
    return row->type;
}

std::string safetensorsDtypeName(torch::ScalarType type) {
    for (const auto& row : kDtypes)
        if (row.type == type) return row.name;
    throw UsageError(std::string("cannot store dtype ") + c10::toString(type) + " in safetensors");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) { parseHeader(); }

void SafetensorsFile::parseHeader() {
    const std::string& p = file_.path();
    if (file_.size() < 8)
        throw FormatError(p + ": file is " + std::to_string(file_.size()) +
                          " bytes, too short for a safetensors header");
    const std::uint64_t headerBytes = readLittleEndian64(file_.data());
    if (headerBytes > kMaxHeaderBytes || headerBytes > file_.size() - 8)
        throw FormatError(p + ": header length " + std::to_string(headerBytes) +
                          " is larger than the file or the 100 MiB limit");
    dataStart_ = 8 + headerBytes;
    const std::size_t dataBytes = file_.size() - dataStart_;

    nlohmann::json header;
    try {
        header = nlohmann::json::parse(file_.data() + 8, file_.data() + dataStart_);
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(p + ": header is not valid JSON (" + e.what() + ")");
    }
    if (!header.is_object()) throw FormatError(p + ": header is not a JSON object");

    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it.value().is_object()) throw FormatError(p + ": __metadata__ is not an object");
            for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                if (!m.value().is_string())
                    throw FormatError(p + ": __metadata__ value '" + m.key() + "' is not a string");
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        entries_.push_back(parseEntry(p, it.key(), it.value(), dataBytes));
        entries_.back().fileOffset = dataStart_ + entries_.back().begin;
    }

    // No two tensors may share bytes.
    std::vector<const SafetensorsEntry*> byOffset;
    for (const auto& e : entries_) byOffset.push_back(&e);
    std::sort(byOffset.begin(), byOffset.end(),
              [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
    const SafetensorsEntry* furthest = nullptr;  // the entry reaching furthest so far
    for (const auto* cur : byOffset) {
        if (cur->end == cur->begin) continue;  // empty tensors occupy no bytes
        if (furthest && cur->begin < furthest->end)
            throw FormatError(p + ": tensors '" + furthest->name + "' and '" + cur->name +
                              "' have overlapping data_offsets");
        if (!furthest || cur->end > furthest->end) furthest = cur;
    }
    std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                               [](const SafetensorsEntry& e, const std::string& n) { return e.name < n; });
    return (it != entries_.end() && it->name == name) ? &*it : nullptr;
}

torch::Tensor SafetensorsFile::readStored(const SafetensorsEntry& e) const {
    const auto type = scalarTypeFromSafetensors(e.dtype);
    const std::uint8_t* src = file_.data() + dataStart_ + e.begin;
    const std::size_t bytes = e.end - e.begin;
    // Copy into a fresh, aligned tensor: offsets in the file need not be aligned to the element
    // size, and the result must outlive the map.
    torch::Tensor out = torch::empty(e.shape, torch::TensorOptions().dtype(type));
    if (bytes) std::memcpy(out.data_ptr(), src, bytes);
    return out;
}

const SafetensorsEntry& SafetensorsFile::entryNamed(const std::string& name) const {
    const SafetensorsEntry* e = find(name);
    if (!e) throw TensorError(path() + ": no tensor named '" + name + "'");
    return *e;
}

torch::Tensor SafetensorsFile::read(const std::string& name) const { return readStored(entryNamed(name)); }

void SafetensorsFile::readInto(const std::string& name, torch::Tensor& out) const {
    const SafetensorsEntry& e = entryNamed(name);
    if (out.sizes() != c10::IntArrayRef(e.shape) || !out.is_contiguous() || !out.device().is_cpu())
        throw TensorError(path() + ": tensor '" + name + "' cannot be read into a tensor of shape " +
                          c10::str(out.sizes()) + " (a contiguous CPU tensor of its shape was expected)");
    const auto stored = scalarTypeFromSafetensors(e.dtype);
    const std::uint8_t* src = file_.data() + dataStart_ + e.begin;
    if (stored == out.scalar_type()) {
        if (e.end > e.begin) std::memcpy(out.data_ptr(), src, e.end - e.begin);
        return;
    }
    // The stored elements go through an aligned buffer (offsets in the file need not be aligned to
    // the element size) and are converted by copy_, as read()'s to() converts them.
    constexpr int64_t kPiece = int64_t{1} << 20;  // elements: 2-8 MiB stored
    const int64_t n = out.numel(), size = static_cast<int64_t>(c10::elementSize(stored));
    torch::Tensor flat = out.view({n});
    torch::Tensor buffer = torch::empty({std::min(n, kPiece)}, torch::TensorOptions().dtype(stored));
    for (int64_t at = 0; at < n; at += kPiece) {
        const int64_t count = std::min(kPiece, n - at);
        std::memcpy(buffer.data_ptr(), src + at * size, static_cast<std::size_t>(count * size));
        flat.narrow(0, at, count).copy_(buffer.narrow(0, 0, count));
    }
}

torch::Tensor SafetensorsFile::read(const std::string& name, torch::ScalarType dtype) const {
    torch::Tensor t = read(name);
    return t.scalar_type() == dtype ? t : t.to(dtype);
}

void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<torch::Tensor> cpu;
    std::size_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        torch::Tensor t = tensor.to(torch::kCPU).contiguous();
        const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
        header[name] = {{"dtype", safetensorsDtypeName(t.scalar_type())},
                        {"shape", t.sizes().vec()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        cpu.push_back(std::move(t));
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned

    writeFileAtomically(path, [&](std::ostream& out) {
        std::uint8_t len[8];
        const std::uint64_t n = text.size();
        for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(n >> (8 * i));
        out.write(reinterpret_cast<const char*>(len), 8);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        for (const auto& t : cpu)
            out.write(static_cast<const char*>(t.data_ptr()),
                      static_cast<std::streamsize>(t.numel() * t.element_size()));
    });
}

}  // namespace kvscope
