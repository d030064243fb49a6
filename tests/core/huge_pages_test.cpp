// SPDX-License-Identifier: MIT
// placeOnHugePages (core/util/huge_pages.h): the weights move into one block advised onto 2 MiB
// pages, with the same values, and a model loaded from disk gets them there.
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

TEST(HugePages, TensorsMoveWithTheirValuesAndTiedSlotsStayShared) {
    torch::manual_seed(3);
    torch::Tensor big = torch::randn({1000, 700}).to(torch::kBFloat16);  // 1.4 MB: spans the block's first page
    torch::Tensor small = torch::randn({13});                             // odd size: the next copy realigns
    torch::Tensor tied = big;
    torch::Tensor unset;
    const torch::Tensor bigBefore = big.clone(), smallBefore = small.clone();
    const torch::Tensor heldElsewhere = small;  // another owner of an original keeps it as it was

    placeOnHugePages({&big, &small, &tied, &unset});

    EXPECT_TRUE(torch::equal(big, bigBefore));
    EXPECT_TRUE(torch::equal(small, smallBefore));
    EXPECT_EQ(big.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(small.sizes(), smallBefore.sizes());
    EXPECT_TRUE(big.is_contiguous() && small.is_contiguous());
    EXPECT_FALSE(unset.defined());
    EXPECT_TRUE(tied.is_same(big)) << "tied slots must stay one tensor";
    EXPECT_NE(small.data_ptr(), heldElsewhere.data_ptr());
    EXPECT_TRUE(torch::equal(heldElsewhere, smallBefore));
    // One block, 2 MiB aligned, each copy on a 64-byte boundary after the one before.
    const auto first = reinterpret_cast<std::uintptr_t>(big.data_ptr());
    const auto second = reinterpret_cast<std::uintptr_t>(small.data_ptr());
    EXPECT_EQ(first % (std::uintptr_t{2} << 20), 0u);
    EXPECT_EQ(second, first + (1000 * 700 * 2 + 63) / 64 * 64);
    if (kernelHasThp()) {
        EXPECT_NE(mappingFlags(big.data_ptr()).find(" hg"), std::string::npos) << mappingFlags(big.data_ptr());
    }
}

TEST(HugePages, TheBlockLivesWhileAnyTensorInItDoes) {
    torch::Tensor a = torch::full({300000}, 1.5f), b = torch::full({5}, 2.5f);
    placeOnHugePages({&a, &b});
    torch::Tensor kept = b;
    a = torch::Tensor();
    b = torch::Tensor();
    EXPECT_TRUE(torch::equal(kept, torch::full({5}, 2.5f)));  // a freed block would fault or read zeros
}

TEST(HugePages, ALoadedModelHasItsWeightsInOneAdvisedBlock) {
    const Transformer model = Transformer::load(test::tinyModel("qwen2"), torch::kFloat32, torch::kCPU);
    const Weights& w = model.weights();
    const auto start = reinterpret_cast<std::uintptr_t>(w.embed.data_ptr());
    EXPECT_EQ(start % (std::uintptr_t{2} << 20), 0u) << "the embedding is the first weight placed";
    for (const torch::Tensor* t : {&w.layers.front().wq, &w.layers.back().wDown, &w.finalNorm, &w.lmHead}) {
        const auto at = reinterpret_cast<std::uintptr_t>(t->data_ptr());
        EXPECT_EQ(at % 64, 0u);
        EXPECT_GT(at, start - 1);
        EXPECT_LT(at - start, std::uintptr_t{64} << 20) << "every weight of the tiny model in one block";
        if (kernelHasThp()) {
            EXPECT_NE(mappingFlags(t->data_ptr()).find(" hg"), std::string::npos) << mappingFlags(t->data_ptr());
        }
    }
}

TEST(HugePages, TheModeIsOneOfTheKernelsWords) {
    const std::string mode = transparentHugePagesMode();
    EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable") << mode;
    EXPECT_GE(hugePageBytesInUse(), kernelHasThp() ? 0 : -1);
}

}  // namespace
}  // namespace kvscope
