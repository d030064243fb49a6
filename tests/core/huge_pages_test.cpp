// SPDX-License-Identifier: MIT
// HugePageArena (core/util/huge_pages.h): copies with the same values in one block advised onto
// 2 MiB pages, and a model loaded from disk gets its weights there.
#include "core/model/checkpoint.h"
#include "core/model/transformer.h"
#include "core/util/huge_pages.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace kvscope {
namespace {

// The VmFlags line of the mapping that holds p (/proc/self/smaps), or "" where none says.
std::string mappingFlags(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    bool inside = false;
    for (std::string line; std::getline(smaps, line);) {
        std::uintptr_t begin = 0, end = 0;
        char dash = 0;
        std::istringstream range(line);
        if (line.find(':') > line.find(' ') && range >> std::hex >> begin >> dash >> end && dash == '-') {
            inside = begin <= address && address < end;  // a mapping's header line: "begin-end perms ..."
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) return line;
    }
    return "";
}

// The kernel accepts the advice wherever it was built with THP (whatever the mode), and marks the
// mapping "hg" in smaps.
bool kernelHasThp() { return transparentHugePagesMode() != "unavailable"; }

TEST(HugePages, CopiesKeepTheirValuesAndLieOneAfterAnotherInTheAdvisedBlock) {
    torch::manual_seed(3);
    const torch::Tensor big = torch::randn({1000, 700}).to(torch::kBFloat16);  // 1.4 MB
    const torch::Tensor small = torch::randn({13});  // odd size: the next copy realigns
    const torch::Tensor strided = torch::randn({6, 4}).t();
    HugePageArena arena(HugePageArena::footprint(big.numel(), torch::kBFloat16) +
                        HugePageArena::footprint(small.numel(), torch::kFloat32) +
                        HugePageArena::footprint(strided.numel(), torch::kFloat32));
    ASSERT_NE(arena.block(), nullptr);
    const torch::Tensor a = arena.place(big), b = arena.place(small), c = arena.place(strided);

    EXPECT_TRUE(torch::equal(a, big));
    EXPECT_TRUE(torch::equal(b, small));
    EXPECT_TRUE(torch::equal(c, strided));
    EXPECT_EQ(a.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(a.is_contiguous() && b.is_contiguous() && c.is_contiguous());
    EXPECT_NE(b.data_ptr(), small.data_ptr());
    const auto first = reinterpret_cast<std::uintptr_t>(a.data_ptr());
    EXPECT_EQ(first, reinterpret_cast<std::uintptr_t>(arena.block()));
    EXPECT_EQ(first % (std::uintptr_t{2} << 20), 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data_ptr()), first + (1000 * 700 * 2 + 63) / 64 * 64);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.data_ptr()) % 64, 0u);
    if (kernelHasThp()) {
        EXPECT_NE(mappingFlags(a.data_ptr()).find(" hg"), std::string::npos) << mappingFlags(a.data_ptr());
    }
}

TEST(HugePages, AFullArenaStillGivesACopy) {
    const torch::Tensor x = torch::arange(100, torch::kFloat32);
    HugePageArena arena(HugePageArena::footprint(x.numel(), torch::kFloat32));
    const torch::Tensor inside = arena.place(x), outside = arena.place(x * 2);
    EXPECT_EQ(inside.data_ptr(), arena.block());
    EXPECT_TRUE(torch::equal(outside, x * 2));
    EXPECT_NE(outside.data_ptr(), arena.block());
    HugePageArena none(0);
    EXPECT_EQ(none.block(), nullptr);
    EXPECT_TRUE(torch::equal(none.place(x), x));
}

TEST(HugePages, ASlotIsTheNextPlaceInTheBlockOrAPlainTensorWhenFull) {
    HugePageArena arena(HugePageArena::footprint(10, torch::kBFloat16) + HugePageArena::footprint(3, torch::kFloat32));
    ASSERT_NE(arena.block(), nullptr);
    const torch::Tensor a = arena.slot({2, 5}, torch::kBFloat16), b = arena.slot({3}, torch::kFloat32);
    const torch::Tensor full = arena.slot({4}, torch::kFloat32);
    EXPECT_EQ(a.sizes(), (std::vector<int64_t>{2, 5}));
    EXPECT_EQ(a.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(a.data_ptr(), arena.block());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data_ptr()), reinterpret_cast<std::uintptr_t>(arena.block()) + 64);
    EXPECT_EQ(full.sizes(), (std::vector<int64_t>{4}));
    EXPECT_EQ(full.scalar_type(), torch::kFloat32);
    const auto outside = reinterpret_cast<std::uintptr_t>(full.data_ptr()),
               block = reinterpret_cast<std::uintptr_t>(arena.block());
    EXPECT_TRUE(outside < block || outside >= block + 128);
}

TEST(HugePages, TheBlockLivesWhileAnyTensorInItDoes) {
    torch::Tensor kept;
    {
        HugePageArena arena(HugePageArena::footprint(300000, torch::kFloat32) +
                            HugePageArena::footprint(5, torch::kFloat32));
        torch::Tensor a = arena.place(torch::full({300000}, 1.5f));
        kept = arena.place(torch::full({5}, 2.5f));
    }  // the arena and the first tensor are gone
    EXPECT_TRUE(torch::equal(kept, torch::full({5}, 2.5f)));  // an unmapped block would fault here
}

// Where a file's byte offset puts a tensor, modulo 64 (a mapped file's pages are 4 KiB aligned).
std::size_t fileAlignment(const std::string& dir, const std::string& name) {
    return Checkpoint::open(dir).fileOffsetAsStored(name, torch::kFloat32).value() % 64;
}

TEST(HugePages, ASlotCanStartWhereAMappedFileWouldPutIt) {
    HugePageArena arena(HugePageArena::footprint(100, torch::kFloat32, 40) +
                        HugePageArena::footprint(3, torch::kFloat32));
    const torch::Tensor a = arena.slot({100}, torch::kFloat32, 40), b = arena.slot({3}, torch::kFloat32);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data_ptr()) % 64, 40u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data_ptr()) % 64, 0u);
    const torch::Tensor outside = arena.slot({7}, torch::kFloat32, 24);  // the arena is full: a plain copy
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(outside.data_ptr()) % 64, 24u);
    outside.fill_(3.0f);
    EXPECT_TRUE(torch::equal(outside, torch::full({7}, 3.0f)));
}

TEST(HugePages, ALoadedModelHasItsWeightsInOneAdvisedBlock) {
    for (const char* variant : {"qwen2", "qwen2-tied"}) {
        SCOPED_TRACE(variant);
        const std::string dir = test::tinyModel(variant);
        const Transformer model = Transformer::load(dir, torch::kFloat32, torch::kCPU);
        const Weights& w = model.weights();
        const auto start = reinterpret_cast<std::uintptr_t>(w.embed.data_ptr());
        // The embedding is the first weight placed; with torch kernels each fp32 weight of this fp32
        // file sits at its file offset's alignment, where transformers' mapped file has it.
        EXPECT_EQ(start % (std::uintptr_t{2} << 20), fileAlignment(dir, "model.embed_tokens.weight"));
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w.layers.front().wq.data_ptr()) % 64,
                  fileAlignment(dir, "model.layers.0.self_attn.q_proj.weight"));
        EXPECT_EQ(w.lmHead.is_same(w.embed), std::string(variant) == "qwen2-tied");
        for (const torch::Tensor* t : {&w.layers.front().wq, &w.layers.back().wDown, &w.finalNorm, &w.lmHead}) {
            const auto at = reinterpret_cast<std::uintptr_t>(t->data_ptr());
            EXPECT_GE(at, start);
            EXPECT_LT(at - start, std::uintptr_t{64} << 20) << "every weight of the tiny model in one block";
            if (kernelHasThp()) {
                EXPECT_NE(mappingFlags(t->data_ptr()).find(" hg"), std::string::npos) << mappingFlags(t->data_ptr());
            }
        }
        // Converted weights (bf16 from this fp32 file) and invariant kernels' weights: 64-byte aligned.
        Numerics invariant;
        invariant.kernels = Kernels::Invariant;
        auto expectAligned = [](const Transformer& m) {
            for (const torch::Tensor* t : {&m.weights().embed, &m.weights().layers.back().wDown})
                EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data_ptr()) % 64, 0u);
        };
        expectAligned(Transformer::load(dir, torch::kBFloat16, torch::kCPU));
        expectAligned(Transformer::load(dir, torch::kFloat32, torch::kCPU, nullptr, invariant));
    }
}

TEST(HugePages, TheModeIsOneOfTheKernelsWords) {
    const std::string mode = transparentHugePagesMode();
    EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable") << mode;
    EXPECT_GE(hugePageBytesInUse(), kernelHasThp() ? 0 : -1);
}

TEST(HugePages, TheBenchLineSaysWhereTheWeightsLieUnderEachMode) {
    for (const char* mode : {"always", "madvise"}) {
        const std::string line = hugePagesSummary(mode);
        EXPECT_NE(line.find("onto 2 MiB pages"), std::string::npos) << line;
        EXPECT_EQ(line.find("4 KiB"), std::string::npos) << line;
    }
    for (const char* mode : {"never", "unavailable"}) {
        const std::string line = hugePagesSummary(mode);
        EXPECT_NE(line.find("stay on 4 KiB pages"), std::string::npos) << line;
        EXPECT_NE(line.find("/sys/kernel/mm/transparent_hugepage/enabled"), std::string::npos) << line;
    }
    EXPECT_NE(hugePagesSummary("never").find("'never'"), std::string::npos);
}

}  // namespace
}  // namespace kvscope
