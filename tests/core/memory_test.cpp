// SPDX-License-Identifier: MIT
// keepFreedMemoryForReuse (core/util/memory.h): a large block freed and allocated again costs no
// new page faults, as a forward's per-layer buffers are.
#include "core/util/memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

namespace {

long minorPageFaults() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

// Allocates `bytes`, writes all of them, frees them; returns the page faults that took.
long pageFaultsOfABlock(std::size_t bytes) {
    const long before = minorPageFaults();
    char* block = static_cast<char*>(std::malloc(bytes));
    if (!block) return -1;
    std::memset(block, 1, bytes);
    asm volatile("" : : "r"(block) : "memory");  // the block is used: no allocation elided
    std::free(block);
    return minorPageFaults() - before;
}

}  // namespace

TEST(Memory, ALargeBlockFreedAndAllocatedAgainTakesNoNewPageFaults) {
    if (!kvscope::keepFreedMemoryForReuse())
        GTEST_SKIP() << "this allocator does not take glibc's mallopt settings (a sanitizer's, or not glibc)";
    constexpr std::size_t kBytes = std::size_t{24} << 20;  // 6144 pages of 4 KiB
    ASSERT_GE(pageFaultsOfABlock(kBytes), 0);  // the heap grows to hold it once
    // glibc's defaults map a block this size afresh and unmap it on free: ~6144 faults every time.
    EXPECT_LT(pageFaultsOfABlock(kBytes), 600);
}
