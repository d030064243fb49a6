// SPDX-License-Identifier: MIT
#include "core/model/gguf.h"

#include "core/util/error.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

namespace kvscope {

namespace {

constexpr std::uint32_t kArrayType = 9;
constexpr std::uint32_t kStringType = 8;
// Bounds that no real file reaches and that keep a hostile count from allocating gigabytes before the
// file's size refutes it: every value takes at least a byte, so a count is also checked against
// the bytes left.
constexpr std::uint64_t kMaxDims = 4;
constexpr std::uint64_t kMaxKeyBytes = 65536;
constexpr std::uint32_t kMaxArrayDepth = 2;
constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 40;  // a 405B model's embedding has 2^31

// Reads the header front to back; every read is checked against the end of the file and a failure
// names the field and where it is.
class Cursor {
public:
    Cursor(const std::uint8_t* data, std::size_t size, std::string path)
        : data_(data), size_(size), path_(std::move(path)) {}

    std::size_t offset() const { return at_; }
    std::size_t left() const { return size_ - at_; }

    [[noreturn]] void fail(const std::string& field, const std::string& what, std::size_t where) const {
        throw FormatError(path_ + ": GGUF " + field + " at byte " + std::to_string(where) + ": " + what);
    }
    [[noreturn]] void fail(const std::string& field, const std::string& what) const { fail(field, what, at_); }

    template <typename T>
    T read(const std::string& field) {
        if (left() < sizeof(T))
            fail(field, "the file ends after " + std::to_string(size_) + " bytes (expected " +
                            std::to_string(sizeof(T)) + " more)");
        T value;
        std::memcpy(&value, data_ + at_, sizeof(T));  // little-endian, as GGUF is and x86 reads it
        at_ += sizeof(T);
        return value;
    }

    std::string string(const std::string& field, std::uint64_t maxBytes = std::numeric_limits<std::uint64_t>::max()) {
        const std::size_t start = at_;
        const auto n = read<std::uint64_t>(field + " (length)");
        if (n > left()) fail(field, "a string of " + std::to_string(n) + " bytes runs past the end of the file", start);
        if (n > maxBytes)
            fail(field, "a string of " + std::to_string(n) + " bytes (at most " + std::to_string(maxBytes) + ")",
                 start);
        std::string s(reinterpret_cast<const char*>(data_ + at_), n);
        at_ += n;
        return s;
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::string path_;
    std::size_t at_ = 0;
};

nlohmann::json readValue(Cursor& in, std::uint32_t type, const std::string& field, std::uint32_t depth) {
    switch (type) {
    case 0: return in.read<std::uint8_t>(field);
    case 1: return in.read<std::int8_t>(field);
    case 2: return in.read<std::uint16_t>(field);
    case 3: return in.read<std::int16_t>(field);
    case 4: return in.read<std::uint32_t>(field);
    case 5: return in.read<std::int32_t>(field);
    case 6: return static_cast<double>(in.read<float>(field));
    case 7: {
        const std::size_t where = in.offset();
        const auto b = in.read<std::uint8_t>(field);
        if (b > 1) in.fail(field, "a bool of value " + std::to_string(b) + " (expected 0 or 1)", where);
        return b == 1;
    }
    case kStringType: return in.string(field);
    case kArrayType: {
        if (depth >= kMaxArrayDepth) in.fail(field, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
        const auto itemType = in.read<std::uint32_t>(field + " (array type)");
        const std::size_t where = in.offset();
        const auto n = in.read<std::uint64_t>(field + " (array length)");
        if (n > in.left()) in.fail(field, "an array of " + std::to_string(n) + " items is longer than the file", where);
        nlohmann::json items = nlohmann::json::array();
        for (std::uint64_t i = 0; i < n; ++i)
            items.push_back(readValue(in, itemType, field + "[" + std::to_string(i) + "]", depth + 1));
        return items;
    }
    case 10: return in.read<std::uint64_t>(field);
    case 11: return in.read<std::int64_t>(field);
    case 12: return in.read<double>(field);
    default: in.fail(field, "unknown value type " + std::to_string(type), in.offset() - 4);
    }
}

constexpr GgmlTypeTraits kF32{"F32", 1, 4}, kF16{"F16", 1, 2}, kBF16{"BF16", 1, 2}, kQ4_0{"Q4_0", 32, 18},
    kQ4_1{"Q4_1", 32, 20}, kQ5_0{"Q5_0", 32, 22}, kQ5_1{"Q5_1", 32, 24}, kQ8_0{"Q8_0", 32, 34}, kQ4_K{"Q4_K", 256, 144},
    kQ5_K{"Q5_K", 256, 176}, kQ6_K{"Q6_K", 256, 210};

}  // namespace

const GgmlTypeTraits* ggmlTypeTraits(std::uint32_t type) {
    switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16;
    case GgmlType::BF16: return &kBF16;
    case GgmlType::Q4_0: return &kQ4_0;
    case GgmlType::Q4_1: return &kQ4_1;
    case GgmlType::Q5_0: return &kQ5_0;
    case GgmlType::Q5_1: return &kQ5_1;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::Q4_K: return &kQ4_K;
    case GgmlType::Q5_K: return &kQ5_K;
    case GgmlType::Q6_K: return &kQ6_K;
    }
    return nullptr;
}

std::string ggmlTypeName(std::uint32_t type) {
    const GgmlTypeTraits* t = ggmlTypeTraits(type);
    return t ? t->name : "type " + std::to_string(type);
}

std::int64_t GgufTensorInfo::elements() const {
    std::int64_t n = 1;
    for (const auto d : ne) n *= d;
    return n;
}

std::vector<std::int64_t> GgufTensorInfo::rowMajorShape() const { return {ne.rbegin(), ne.rend()}; }

bool isGgufPath(const std::string& path) { return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0; }

bool isGgufFile(const std::string& path) {
    std::error_code error;
    return isGgufPath(path) && !std::filesystem::is_directory(path, error);
}

namespace {

// general.alignment, where the file sets it: a power of two up to 64 KiB (32 otherwise).
std::uint64_t dataAlignment(const nlohmann::json& metadata, Cursor& in) {
    if (!metadata.contains("general.alignment")) return 32;
    const auto& a = metadata["general.alignment"];
    if (!a.is_number_unsigned() || a.get<std::uint64_t>() == 0 || a.get<std::uint64_t>() > 65536 ||
        (a.get<std::uint64_t>() & (a.get<std::uint64_t>() - 1)) != 0)
        in.fail("metadata 'general.alignment'", "expected a power of two up to 65536, got " + a.dump(), 0);
    return a.get<std::uint64_t>();
}

// A tensor's shape as the table gives it (ne[0] first): 1 to 4 dimensions, none 0, at most
// kMaxTensorElements elements in all.
std::vector<std::int64_t> readShape(Cursor& in, const std::string& named, std::size_t dimsAt) {
    const auto dims = in.read<std::uint32_t>(named + " (dimensions)");
    if (dims == 0 || dims > kMaxDims) in.fail(named, std::to_string(dims) + " dimensions (expected 1 to 4)", dimsAt);
    std::vector<std::int64_t> ne;
    std::int64_t elements = 1;
    for (std::uint32_t d = 0; d < dims; ++d) {
        const std::size_t at = in.offset();
        const auto n = in.read<std::uint64_t>(named + " (ne[" + std::to_string(d) + "])");
        if (n == 0 || n > static_cast<std::uint64_t>(kMaxTensorElements) ||
            elements > kMaxTensorElements / static_cast<std::int64_t>(n))
            in.fail(named,
                    "dimension " + std::to_string(d) + " of " + std::to_string(n) + " (a tensor has 1 to " +
                        std::to_string(kMaxTensorElements) + " elements)",
                    at);
        elements *= static_cast<std::int64_t>(n);
        ne.push_back(static_cast<std::int64_t>(n));
    }
    return ne;
}

// Tensor `i` of the table: name, shape, type (one kvscope dequantizes, in whole blocks per row) and
// its data offset (a multiple of the alignment), which `offset` receives, read at file offset
// `offsetAt` (where a later refusal of the entry points).
GgufTensorInfo readTensorInfo(Cursor& in, std::uint64_t i, std::uint64_t alignment, std::uint64_t& offset,
                              std::size_t& offsetAt) {
    GgufTensorInfo t;
    t.name = in.string("tensor " + std::to_string(i) + " (name)", kMaxKeyBytes);
    const std::string named = "tensor '" + t.name + "'";
    const std::size_t dimsAt = in.offset();
    t.ne = readShape(in, named, dimsAt);
    const std::size_t typeAt = in.offset();
    const auto type = in.read<std::uint32_t>(named + " (type)");
    const GgmlTypeTraits* traits = ggmlTypeTraits(type);
    if (!traits)
        in.fail(named,
                "tensor type " + ggmlTypeName(type) +
                    " (kvscope dequantizes F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                typeAt);
    if (t.ne[0] % traits->blockSize != 0)
        in.fail(named,
                "rows of " + std::to_string(t.ne[0]) + " elements are not whole " + traits->name + " blocks of " +
                    std::to_string(traits->blockSize),
                dimsAt);
    std::int64_t elements = 1;
    for (const std::int64_t n : t.ne) elements *= n;
    t.type = static_cast<GgmlType>(type);
    t.bytes = static_cast<std::size_t>(elements / traits->blockSize * traits->blockBytes);
    offsetAt = in.offset();
    offset = in.read<std::uint64_t>(named + " (offset)");
    if (offset % alignment != 0)
        in.fail(named,
                "data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                    std::to_string(alignment),
                offsetAt);
    return t;
}

struct Placed {
    std::uint64_t offset;  // in the data section
    std::size_t index;     // in the tensor table
};

// Each tensor's bytes inside the data section (which starts at `dataStart` of a file of `fileSize`
// bytes), none overlapping another; sets their file offsets.
void placeTensorData(std::vector<GgufTensorInfo>& tensors, std::vector<Placed> placed, std::size_t dataStart,
                     std::size_t fileSize, const std::string& path) {
    const std::size_t dataBytes = fileSize > dataStart ? fileSize - dataStart : 0;
    std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    std::uint64_t previousEnd = 0;
    std::string previousName;
    for (const Placed& p : placed) {
        GgufTensorInfo& t = tensors[p.index];
        if (p.offset > dataBytes || t.bytes > dataBytes - p.offset)
            throw FormatError(path + ": GGUF tensor '" + t.name + "': its " + std::to_string(t.bytes) +
                              " bytes at data offset " + std::to_string(p.offset) + " run past the end of the file (" +
                              std::to_string(dataBytes) + " bytes of data)");
        if (p.offset < previousEnd)
            throw FormatError(path + ": GGUF tensor '" + t.name + "' overlaps tensor '" + previousName + "'");
        previousEnd = p.offset + t.bytes;
        previousName = t.name;
        t.fileOffset = dataStart + p.offset;
    }
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : file_(path) {
    Cursor in(file_.data(), file_.size(), path);
    if (file_.size() < 4 || std::memcmp(file_.data(), "GGUF", 4) != 0)
        in.fail("magic", "not a GGUF file (expected the bytes 'GGUF')");
    in.read<std::uint32_t>("magic");
    const auto version = in.read<std::uint32_t>("version");
    if (version != 2 && version != 3)
        in.fail("version", "version " + std::to_string(version) + " (kvscope reads versions 2 and 3)", 4);
    const auto tensorCount = in.read<std::uint64_t>("tensor count");
    const auto metadataCount = in.read<std::uint64_t>("metadata count");
    if (metadataCount > in.left())
        in.fail("metadata count", std::to_string(metadataCount) + " entries cannot fit in the file", 16);
    for (std::uint64_t i = 0; i < metadataCount; ++i) {
        const std::size_t where = in.offset();
        const std::string key = in.string("metadata key " + std::to_string(i), kMaxKeyBytes);
        if (key.empty()) in.fail("metadata key " + std::to_string(i), "an empty key", where);
        if (metadata_.contains(key)) in.fail("metadata '" + key + "'", "the key appears twice", where);
        const auto type = in.read<std::uint32_t>("metadata '" + key + "' (type)");
        metadata_[key] = readValue(in, type, "metadata '" + key + "'", 0);
    }
    const std::uint64_t alignment = dataAlignment(metadata_, in);
    if (tensorCount > in.left())
        in.fail("tensor count", std::to_string(tensorCount) + " tensors cannot fit in the file", 8);
    std::vector<Placed> placed;
    for (std::uint64_t i = 0; i < tensorCount; ++i) {
        std::uint64_t offset = 0;
        std::size_t offsetAt = 0;
        GgufTensorInfo t = readTensorInfo(in, i, alignment, offset, offsetAt);
        if (!tensorIndex_.emplace(t.name, tensors_.size()).second)
            in.fail("tensor '" + t.name + "'", "the name appears twice", offsetAt);
        placed.push_back({offset, tensors_.size()});
        tensors_.push_back(std::move(t));
    }
    const std::size_t dataStart = (in.offset() + alignment - 1) / alignment * alignment;
    if (dataStart > file_.size() && !tensors_.empty()) in.fail("tensor data", "the file ends before its data section");
    placeTensorData(tensors_, std::move(placed), dataStart, file_.size(), path);
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
    const auto it = tensorIndex_.find(name);
    return it == tensorIndex_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void wrongKind(const std::string& path, const std::string& key, const std::string& wanted,
                            const nlohmann::json* value) {
    throw FormatError(
        path + ": GGUF metadata '" + key + "': " +
        (value ? "expected " + wanted + ", got " + value->dump().substr(0, 80) : "missing (expected " + wanted + ")"));
}
}  // namespace

std::string GgufFile::string(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end() || !it->is_string())
        wrongKind(path(), key, "a string", it == metadata_.end() ? nullptr : &*it);
    return it->get<std::string>();
}

std::int64_t GgufFile::integer(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end() || !it->is_number_integer() ||
        (it->is_number_unsigned() &&
         it->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
        wrongKind(path(), key, "an integer", it == metadata_.end() ? nullptr : &*it);
    return it->get<std::int64_t>();
}

const nlohmann::json& GgufFile::array(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end() || !it->is_array())
        wrongKind(path(), key, "an array", it == metadata_.end() ? nullptr : &*it);
    return *it;
}

}  // namespace kvscope
