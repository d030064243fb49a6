// SPDX-License-Identifier: MIT
// The safetensors reader on good and deliberately broken files.
#include "core/model/safetensors.h"
#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <fstream>

namespace kvscope {
namespace {

// A file with the given raw header text and `dataBytes` zero bytes of data.
std::string rawFile(const test::TempDir& dir, const std::string& header, std::size_t dataBytes,
                    std::uint64_t declaredLength = UINT64_MAX) {
    const std::string path = dir.file("raw.safetensors");
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t n = declaredLength == UINT64_MAX ? header.size() : declaredLength;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(dataBytes, '\0');
    return path;
}

// Expects a FormatError whose message contains every fragment.
void expectFormatError(const std::string& path, std::vector<std::string> fragments) {
    try {
        SafetensorsFile f(path);
        FAIL() << "expected a FormatError for " << path;
    } catch (const FormatError& e) {
        for (const auto& frag : fragments) EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
    }
}

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
    test::TempDir dir;
    std::vector<std::pair<std::string, torch::Tensor>> tensors = {
        {"f32", torch::randn({3, 5})},
        {"bf16", torch::randn({7}).to(torch::kBFloat16)},
        {"f16", torch::randn({2, 2}).to(torch::kFloat16)},
        {"i64", torch::arange(10)},
        {"empty", torch::zeros({0, 4})},
    };
    writeSafetensors(dir.file("a.safetensors"), tensors, {{"purpose", "test"}});
    SafetensorsFile f(dir.file("a.safetensors"));
    EXPECT_EQ(f.metadata().at("purpose"), "test");
    ASSERT_EQ(f.entries().size(), tensors.size());
    for (const auto& [name, t] : tensors) {
        torch::Tensor back = f.read(name);
        EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
        EXPECT_TRUE(torch::equal(back, t)) << name;
    }
    EXPECT_EQ(f.find("bf16")->dtype, "BF16");
    // Conversion on read.
    EXPECT_TRUE(torch::equal(f.read("bf16", torch::kFloat32), tensors[1].second.to(torch::kFloat32)));
}

TEST(Safetensors, ReadIntoConvertsAsReadDoesWithoutAWholeTensorCopy) {
    test::TempDir dir;
    // "odd" puts the next tensors at offsets that are not multiples of their element size; "big"
    // spans several of readInto's pieces (2^20 elements) and ends inside one.
    const torch::Tensor big = torch::randn({(1 << 20) * 2 + 3}, torch::kFloat64);
    std::vector<std::pair<std::string, torch::Tensor>> tensors = {
        {"odd", torch::ones({1}, torch::kUInt8)},
        {"f32", torch::randn({3, 5}) * 1e3},
        {"bf16", torch::randn({7}).to(torch::kBFloat16)},
        {"f16", torch::randn({2, 2}).to(torch::kFloat16)},
        {"big", big},
        {"empty", torch::zeros({0, 4})},
    };
    writeSafetensors(dir.file("a.safetensors"), tensors, {});
    SafetensorsFile f(dir.file("a.safetensors"));
    for (const char* name : {"f32", "bf16", "f16", "big", "empty"})
        for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kFloat64}) {
            const torch::Tensor expected = f.read(name, dtype);
            torch::Tensor into = torch::full(expected.sizes(), 7.0, torch::TensorOptions().dtype(dtype));
            f.readInto(name, into);
            EXPECT_TRUE(torch::equal(into, expected)) << name << " as " << c10::toString(dtype);
        }
    // The destination must be a contiguous tensor of the stored shape; the message names file and tensor.
    // Another shape, and the right shape but not contiguous.
    for (torch::Tensor wrong : {torch::empty({5, 3}), torch::empty({5, 3}).t()}) {
        try {
            f.readInto("f32", wrong);
            FAIL() << "expected a TensorError";
        } catch (const TensorError& e) {
            EXPECT_NE(std::string(e.what()).find("a.safetensors: tensor 'f32'"), std::string::npos) << e.what();
        }
    }
    torch::Tensor any = torch::empty({1});
    EXPECT_THROW(f.readInto("absent", any), TensorError);
}

TEST(Safetensors, TruncatedFileIsRejectedNamingTheTensor) {
    test::TempDir dir;
    writeSafetensors(dir.file("a.safetensors"), {{"w", torch::ones({64})}});
    std::filesystem::resize_file(dir.file("a.safetensors"), std::filesystem::file_size(dir.file("a.safetensors")) - 10);
    expectFormatError(dir.file("a.safetensors"), {"a.safetensors", "'w'", "past the data section"});
}

TEST(Safetensors, TooShortForAHeader) {
    test::TempDir dir;
    test::writeTextFile(dir.file("short.safetensors"), "abc");
    expectFormatError(dir.file("short.safetensors"), {"short.safetensors", "too short"});
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
    test::TempDir dir;
    expectFormatError(rawFile(dir, "{}", 0, 1ull << 40), {"header length"});
}

TEST(Safetensors, HeaderThatIsNotJson) {
    test::TempDir dir;
    expectFormatError(rawFile(dir, "{not json", 0), {"not valid JSON"});
}

TEST(Safetensors, OffsetsOutOfRange) {
    test::TempDir dir;
    expectFormatError(rawFile(dir, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                      {"'w'", "past the data section"});
}

TEST(Safetensors, OverlappingTensors) {
    test::TempDir dir;
    expectFormatError(rawFile(dir,
                              R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                              R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                              24),
                      {"overlapping", "'a'", "'b'"});
}

TEST(Safetensors, ShapeAndDtypeMustMatchTheByteSpan) {
    test::TempDir dir;
    expectFormatError(rawFile(dir, R"({"w":{"dtype":"BF16","shape":[3,3],"data_offsets":[0,16]}})", 16),
                      {"'w'", "does not match dtype BF16", "9 elements"});
}

TEST(Safetensors, UnsupportedDtypeAndMissingFields) {
    test::TempDir dir;
    expectFormatError(rawFile(dir, R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1),
                      {"'w'", "unsupported dtype 'F8_E4M3'"});
    expectFormatError(rawFile(dir, R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4), {"'w'", "'shape'"});
    expectFormatError(rawFile(dir, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), {"non-negative"});
}

TEST(Safetensors, MissingFileIsAFormatError) {
    expectFormatError("/nonexistent/dir/model.safetensors", {"/nonexistent/dir/model.safetensors", "cannot open"});
}

TEST(Safetensors, ReadingAnAbsentTensorNamesIt) {
    test::TempDir dir;
    writeSafetensors(dir.file("a.safetensors"), {{"w", torch::ones({2})}});
    SafetensorsFile f(dir.file("a.safetensors"));
    EXPECT_THROW(f.read("nope"), TensorError);
}

TEST(Safetensors, WriterLeavesNoPartialFileBehind) {
    test::TempDir dir;
    writeSafetensors(dir.file("a.safetensors"), {{"w", torch::ones({2})}});
    EXPECT_FALSE(std::filesystem::exists(dir.file("a.safetensors.partial")));
    EXPECT_THROW(writeSafetensors(dir.file("no/such/dir/a.safetensors"), {{"w", torch::ones({2})}}), FormatError);
}

TEST(AtomicFiles, AFailedWriteLeavesNeitherAFileNorAPartial) {
    test::TempDir dir;
    const std::string path = dir.file("out.bin");
    test::writeTextFile(path, "old");
    EXPECT_THROW(writeFileAtomically(path,
                                     [](std::ostream& out) {
                                         out << "half";
                                         throw FormatError("interrupted");
                                     }),
                 FormatError);
    EXPECT_EQ(test::readTextFile(path), "old") << "the previous content survives";
    EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
    writeTextFileAtomically(path, "new");
    EXPECT_EQ(test::readTextFile(path), "new");
    // Strays of a killed writer are swept; finished files are not touched.
    test::writeTextFile(dir.file("a.safetensors.partial"), "x");
    std::filesystem::create_directories(dir.file("model.partial"));
    EXPECT_EQ(removePartialFiles(dir.path()), 2);
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(removePartialFiles(dir.file("no-such-folder")), 0);
}

}  // namespace
}  // namespace kvscope
