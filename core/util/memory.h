// SPDX-License-Identifier: MIT
#pragma once
namespace kvscope {

// Has glibc's malloc keep freed memory for reuse instead of handing it back to the kernel. A
// forward allocates and frees the same large buffers every layer (a 512-token prefill's linear
// outputs are ~10 MB each); by default glibc maps such blocks fresh and unmaps them on free, so
// every layer pays page faults on memory it just gave back; 64 MiB gave the fastest prefills
// (docs/history/kernel-measurements.md, "Freed memory kept"). Blocks up to 64 MiB come from the heap, and up to
// 512 MiB of free heap stays with the process. Call it first thing in main(), before other threads
// exist. Returns whether the allocator accepted the settings (a sanitizer's allocator does not).
bool keepFreedMemoryForReuse();

}  // namespace kvscope
