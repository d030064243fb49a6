// SPDX-License-Identifier: MIT
// GGUF files: every ggml type dequantized bit for bit as the gguf package does (tests/data/gguf,
// written by make_gguf_cases.py), a table of malformed headers each refused naming its field and
// offset, and SmolLM2's own Q4_1 file against the Hugging Face folder transformers made of it.
#include "core/model/checkpoint.h"
#include "core/model/gguf.h"
#include "core/model/transformer.h"
#include "core/text/tokenizer.h"
#include "core/util/error.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace kvscope {
namespace {

TEST(Gguf, EveryTypeDequantizesToTheGgufPackagesFloatsBitForBit) {
    const GgufFile file(test::testDataDir() + "/gguf/types.gguf");
    const SafetensorsFile expected(test::testDataDir() + "/gguf/types-expected.safetensors");
    ASSERT_EQ(file.tensors().size(), 11u);
    for (const GgufTensorInfo& t : file.tensors()) {
        SCOPED_TRACE(t.name);
        EXPECT_EQ(ggmlTypeName(static_cast<std::uint32_t>(t.type)), t.name);
        EXPECT_EQ(t.rowMajorShape(), (std::vector<int64_t>{2, 512}));
        torch::Tensor mine = torch::empty({2, 512}, torch::kFloat32);
        dequantizeToFloat(t.type, file.bytesOf(t), t.elements(), mine.data_ptr<float>());
        const torch::Tensor theirs = expected.read(t.name);
        // Bits, not values: -0.0 and 0.0 differ here, and so would a NaN.
        EXPECT_TRUE(torch::equal(mine.view(torch::kInt32), theirs.view(torch::kInt32)));
    }
}

// A well-formed file: one metadata string, one F32 tensor [2, 32]. Offsets below are into it.
std::string minimalGguf() {
    std::string b;
    auto u32 = [&](std::uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
    auto u64 = [&](std::uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
    auto str = [&](const std::string& s) { u64(s.size()), b += s; };
    b += "GGUF";
    u32(3);                           // version            @4
    u64(1);                           // tensors            @8
    u64(1);                           // metadata entries   @16
    str("general.architecture");      // key                @24
    u32(8);                           // type string        @52
    str("llama");                     // value              @56
    str("w");                         // tensor name        @69
    u32(2);                           // dims               @78
    u64(32);                          // ne[0]              @82
    u64(2);                           // ne[1]              @90
    u32(0);                           // F32                @98
    u64(0);                           // offset             @102
    b.resize(128, '\0');              // aligned to 32
    b.append(2 * 32 * 4, '\1');
    return b;
}

template <typename T>
void put(std::string& b, std::size_t at, T v) {
    std::memcpy(b.data() + at, &v, sizeof v);
}

TEST(Gguf, AMalformedHeaderIsRefusedNamingItsFieldAndOffset) {
    test::TempDir dir;
    const std::string path = dir.file("m.gguf");
    auto refused = [&](const std::string& bytes) -> std::string {
        test::writeTextFile(path, bytes);
        try {
            GgufFile f(path);
        } catch (const FormatError& e) {
            return e.what();
        }
        return "accepted";
    };
    const std::string good = minimalGguf();
    ASSERT_EQ(refused(good), "accepted");
    struct Case {
        const char* what;
        std::function<void(std::string&)> damage;
        const char* fragment;
    };
    const std::vector<Case> cases = {
        {"magic", [](std::string& b) { b[0] = 'X'; }, "magic at byte 0"},
        {"empty", [](std::string& b) { b.clear(); }, "not a GGUF file"},
        {"version 1", [](std::string& b) { put<std::uint32_t>(b, 4, 1); }, "version 1"},
        {"truncated header", [](std::string& b) { b.resize(20); }, "metadata count"},
        {"metadata count", [](std::string& b) { put<std::uint64_t>(b, 16, 1ull << 60); }, "cannot fit"},
        {"key length", [](std::string& b) { put<std::uint64_t>(b, 24, 1ull << 40); }, "runs past the end"},
        {"value type", [](std::string& b) { put<std::uint32_t>(b, 52, 99); }, "unknown value type 99"},
        {"bool", [](std::string& b) { put<std::uint32_t>(b, 52, 7); }, "metadata 'general.architecture'"},
        {"array length",
         [](std::string& b) {
             put<std::uint32_t>(b, 52, 9), put<std::uint32_t>(b, 56, 0), put<std::uint64_t>(b, 60, 1ull << 50);
         },
         "longer than the file"},
        {"tensor count", [](std::string& b) { put<std::uint64_t>(b, 8, 1ull << 62); }, "tensor count"},
        {"dimensions", [](std::string& b) { put<std::uint32_t>(b, 78, 9); }, "9 dimensions"},
        {"zero dimension", [](std::string& b) { put<std::uint64_t>(b, 90, 0); }, "dimension 1 of 0"},
        {"huge dimensions",
         [](std::string& b) { put<std::uint64_t>(b, 82, 1ull << 32), put<std::uint64_t>(b, 90, 1ull << 32); },
         "elements"},
        {"tensor type", [](std::string& b) { put<std::uint32_t>(b, 98, 23); }, "tensor type type 23"},
        {"partial blocks", [](std::string& b) { put<std::uint32_t>(b, 98, 12); }, "not whole Q4_K blocks"},
        {"unaligned offset", [](std::string& b) { put<std::uint64_t>(b, 102, 4); }, "not a multiple of the alignment"},
        {"data past the end", [](std::string& b) { b.resize(b.size() - 1); }, "run past the end of the file"},
        {"offset past the end", [](std::string& b) { put<std::uint64_t>(b, 102, 1ull << 40); }, "run past the end"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        std::string bytes = good;
        c.damage(bytes);
        const std::string message = refused(bytes);
        EXPECT_NE(message.find(c.fragment), std::string::npos) << message;
        if (message != "accepted") {
            EXPECT_NE(message.find(path), std::string::npos) << message;
        }
    }
}

TEST(Gguf, AFileOfAnotherArchitectureIsRefusedNamingIt) {
    test::TempDir dir;
    std::string bytes = minimalGguf();
    bytes.replace(64, 5, "gpt2x");
    test::writeTextFile(dir.file("a.gguf"), bytes);
    try {
        Checkpoint::open(dir.file("a.gguf"));
        FAIL() << "accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("'general.architecture' is 'gpt2x'"), std::string::npos) << e.what();
    }
}

// The real model, where scripts/fetch-test-data.sh --smollm2 fetched it (the test command does, for
// torch-pip): transformers' GGUF loader made the folder from this very file.
TEST(Gguf, SmolLM2sFileLoadsAsTheFolderTransformersMadeOfIt) {
    const std::string gguf = test::testDataDir() + "/smollm2-135m-instruct.Q4_1.gguf";
    const std::string folder = test::testDataDir() + "/smollm2-135m-instruct";
    if (!std::filesystem::exists(gguf) || !std::filesystem::exists(folder + "/model.safetensors"))
        GTEST_SKIP() << "SmolLM2 not fetched (scripts/fetch-test-data.sh --smollm2 PYTHON)";
    const Checkpoint fromGguf = Checkpoint::open(gguf), fromFolder = Checkpoint::open(folder);
    EXPECT_EQ(fromGguf.config().toJson(), fromFolder.config().toJson());
    for (const auto& want : expectedTensors(fromFolder.config())) {
        SCOPED_TRACE(want.name);
        const torch::Tensor a = fromGguf.read(want.name, torch::kFloat32),
                            b = fromFolder.read(want.name, torch::kFloat32);
        ASSERT_TRUE(torch::equal(a.view(torch::kInt32), b.view(torch::kInt32)));
    }
    const Tokenizer t1 = Tokenizer::fromModelDir(gguf), t2 = Tokenizer::fromModelDir(folder);
    for (const std::string text :
         {"Hello world, 12345 café", "<|im_start|>user\n  tabs\tand\nnew lines<|im_end|>", "naïve 東京 🙂 ' 's 'll"}) {
        EXPECT_EQ(t1.encode(text), t2.encode(text)) << text;
        EXPECT_EQ(t1.decode(t1.encode(text)), t2.decode(t2.encode(text))) << text;
    }
}

}  // namespace
}  // namespace kvscope
