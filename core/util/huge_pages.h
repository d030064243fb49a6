// SPDX-License-Identifier: MIT
#pragma once
// Model weights on transparent huge pages (2 MiB), where the kernel offers them.
//
// Why: a decode step streams every weight once from memory, and on 4 KiB pages a stream pays a page
// walk every 4 KiB (under a hypervisor, a two-level one) and its hardware prefetches stop at each
// page's end (the likely reasons; the effect is what was measured). Measured on a 2-core Zen 4 KVM
// guest (THP `madvise`, Debian's default): two threads reading 256 MiB by AVX-512 loads, passes on
// 4 KiB and 2 MiB pages interleaved, 20.4 against 30.7 GB/s on average; 1 GiB, 25.7 against 34.9.
// With the AVX-512 paths' decode tiles made for them (invariant_avx512_vec.h), bf16 decode of the
// Qwen2.5-0.5B shape on the invariant kernels there ran at 25.1-30.5 tok/s over six `kvscope bench`
// runs, against 16.8-25.5 before. Same values, same bits: only where the weights lie changes.
#include <torch/torch.h>

#include <string>
#include <vector>

namespace kvscope {

// Moves the tensors into one block of memory advised MADV_HUGEPAGE and aligned to 2 MiB, each
// tensor's copy 64-byte aligned. Same values, same shapes and dtypes, contiguous; a tensor that
// several slots share (tied embeddings) stays shared. Each original is released once copied (the
// block's pages are touched only as copies land in it), so the weights are not held twice over. CPU tensors only;
// undefined slots are left alone. Without THP (or mmap) the block is ordinary memory.
void placeOnHugePages(const std::vector<torch::Tensor*>& slots);

// The kernel's THP mode: "always", "madvise", "never", or "unavailable" (no such file).
std::string transparentHugePagesMode();

// Bytes of this process's anonymous memory on huge pages now (AnonHugePages of
// /proc/self/smaps_rollup), or -1 where the kernel does not say.
int64_t hugePageBytesInUse();

// n bytes, 2 MiB aligned and advised MADV_HUGEPAGE (as the weights are), for bandwidth probes that
// must read memory as the kernels do; released by freeHugePageBlock. Null when out of memory.
void* allocateHugePageBlock(std::size_t bytes);
void freeHugePageBlock(void* block, std::size_t bytes);

}  // namespace kvscope
