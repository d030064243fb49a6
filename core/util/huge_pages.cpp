// SPDX-License-Identifier: MIT
#include "core/util/huge_pages.h"

#include "core/util/error.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <memory>

namespace kvscope {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kAlignment = 64;  // the kernels' vector loads never straddle a cache line start

std::size_t roundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* allocateHugePageBlock(std::size_t bytes) {
    const std::size_t size = roundUp(bytes, kHugePage);
    // mmap gives 4 KiB alignment; map one huge page more and unmap the ends to get 2 MiB.
    void* mapped = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<std::uintptr_t>(mapped);
    const std::uintptr_t aligned = roundUp(start, kHugePage);
    if (aligned > start) ::munmap(mapped, aligned - start);
    const std::uintptr_t tail = aligned + size, end = start + size + kHugePage;
    if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
#ifdef MADV_HUGEPAGE
    ::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);  // a hint: ignored where THP is off
#endif
    return reinterpret_cast<void*>(aligned);
}

void freeHugePageBlock(void* block, std::size_t bytes) {
    if (block) ::munmap(block, roundUp(bytes, kHugePage));
}

void placeOnHugePages(const std::vector<torch::Tensor*>& slots) {
    // One copy per distinct tensor, however many slots share it.
    std::map<const c10::TensorImpl*, std::size_t> offsetOf;
    std::size_t bytes = 0;
    for (torch::Tensor* slot : slots) {
        if (!slot->defined()) continue;
        if (!slot->device().is_cpu())
            throw UsageError("placeOnHugePages(): tensors must be on the CPU (got " + slot->device().str() + ")");
        if (offsetOf.emplace(slot->unsafeGetTensorImpl(), bytes).second)
            bytes = roundUp(bytes + slot->numel() * slot->element_size(), kAlignment);
    }
    if (bytes == 0) return;
    void* block = allocateHugePageBlock(bytes);
    if (!block) return;  // out of address space: the weights stay where they are, same values
    // The block lives while any tensor in it does.
    const auto owner = std::shared_ptr<void>(block, [bytes](void* p) { freeHugePageBlock(p, bytes); });
    std::map<const c10::TensorImpl*, torch::Tensor> moved;
    for (torch::Tensor* slot : slots) {
        if (!slot->defined()) continue;
        const c10::TensorImpl* original = slot->unsafeGetTensorImpl();
        auto it = moved.find(original);
        if (it == moved.end()) {
            auto* data = static_cast<char*>(block) + offsetOf.at(original);
            torch::Tensor copy = torch::from_blob(data, slot->sizes(), [owner](void*) {}, slot->options());
            copy.copy_(*slot);
            it = moved.emplace(original, copy).first;
        }
        *slot = it->second;  // the original goes when its last slot does
    }
}

std::string transparentHugePagesMode() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (!std::getline(in, line)) return "unavailable";
    // "always [madvise] never": the bracketed word is the mode.
    const auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
    return line.substr(open + 1, close - open - 1);
}

int64_t hugePageBytesInUse() {
    std::ifstream in("/proc/self/smaps_rollup");
    std::string key;
    int64_t kib = 0;
    while (in >> key) {
        if (key == "AnonHugePages:" && in >> kib) return kib * 1024;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    return -1;
}

}  // namespace kvscope
