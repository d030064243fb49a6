// SPDX-License-Identifier: MIT
#pragma once
// Model weights on transparent huge pages (2 MiB), where the kernel offers them.
//
// Why: a decode step streams every weight once from memory, and on 4 KiB pages a stream pays a page
// walk every 4 KiB (under a hypervisor, a two-level one) and its hardware prefetches stop at each
// page's end (the likely reasons; the effect is what was measured: docs/history/
// kernel-measurements.md, "2 MiB pages"). Same values, same bits: only where the weights lie changes.
#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <string>

namespace kvscope {

// One block of memory, 2 MiB aligned and advised MADV_HUGEPAGE, that tensors are copied into one
// after another. Transformer::load reads each weight straight into its slot, so that the process
// never holds a second copy of any weight.
class HugePageArena {
public:
    explicit HugePageArena(std::size_t bytes);  // bytes: the sum of footprint() of what will be placed

    // What a tensor of n elements of `dtype` takes in the block. Each copy starts `misalignment`
    // bytes (0-63) past a 64-byte boundary: 0, or where a mapped file would put it (see slot()).
    static std::size_t footprint(int64_t numel, torch::ScalarType dtype, std::size_t misalignment = 0);

    // A contiguous copy of t (a CPU tensor) in the block, which lives as long as any tensor in it.
    // Where the block is full or could not be mapped: a plain contiguous copy, the same values.
    torch::Tensor place(const torch::Tensor& t);
    // The next uninitialised tensor of `sizes` and `dtype` in the block (what place() copies into),
    // starting `misalignment` bytes past a 64-byte boundary; where the block is full or could not
    // be mapped, a plain one at the same offset from its 64-byte-aligned start. (MKL's fp32 products
    // without conditional reproducibility give other bits for other weight alignments: a weight
    // used where a file maps it has the file offset's alignment, Transformer::load.)
    torch::Tensor slot(c10::IntArrayRef sizes, torch::ScalarType dtype, std::size_t misalignment = 0);

    void* block() const { return block_.get(); }  // null where mmap failed or bytes was 0

private:
    std::shared_ptr<void> block_;
    std::size_t size_ = 0, used_ = 0;
};

// The kernel's THP mode: "always", "madvise", "never", or "unavailable" (no such file).
std::string transparentHugePagesMode();

// What a THP mode means for the weights and the bench's probe arrays, in a line for `kvscope bench`:
// under "never" (or without THP) they stay on 4 KiB pages and decode streams slower, and the line
// says how an administrator changes that.
std::string hugePagesSummary(const std::string& mode);

// Bytes of this process's anonymous memory on huge pages now (AnonHugePages of
// /proc/self/smaps_rollup), or -1 where the kernel does not say.
int64_t hugePageBytesInUse();

// n bytes, 2 MiB aligned and advised MADV_HUGEPAGE (as the weights are), for bandwidth probes that
// must read memory as the kernels do; released by freeHugePageBlock. Null when out of memory.
void* allocateHugePageBlock(std::size_t bytes);
void freeHugePageBlock(void* block, std::size_t bytes);

}  // namespace kvscope
