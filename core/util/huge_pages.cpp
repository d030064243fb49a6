// SPDX-License-Identifier: MIT
#include "core/util/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <fstream>
#include <limits>

namespace kvscope {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kAlignment = 64;  // the kernels' vector loads never straddle a cache line start

std::size_t roundUp(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void* allocateHugePageBlock(std::size_t bytes) {
    if (bytes == 0) return nullptr;
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

HugePageArena::HugePageArena(std::size_t bytes) {
    if (void* p = allocateHugePageBlock(bytes)) {
        block_ = std::shared_ptr<void>(p, [bytes](void* q) { freeHugePageBlock(q, bytes); });
        size_ = bytes;
    }
}

std::size_t HugePageArena::footprint(int64_t numel, torch::ScalarType dtype, std::size_t misalignment) {
    return roundUp(misalignment % kAlignment + static_cast<std::size_t>(numel) * c10::elementSize(dtype), kAlignment);
}

torch::Tensor HugePageArena::slot(c10::IntArrayRef sizes, torch::ScalarType dtype, std::size_t misalignment) {
    misalignment %= kAlignment;
    const std::size_t bytes = footprint(c10::multiply_integers(sizes), dtype, misalignment);
    if (!block_ || used_ + bytes > size_) {
        if (misalignment == 0) return torch::empty(sizes, torch::TensorOptions().dtype(dtype));
        // torch's CPU allocator aligns to 64 bytes: over-allocate and start the tensor that far in.
        torch::Tensor holder = torch::empty({static_cast<int64_t>(bytes)}, torch::TensorOptions().dtype(torch::kUInt8));
        return torch::from_blob(
            static_cast<char*>(holder.data_ptr()) + misalignment, sizes, [holder](void*) {},
            torch::TensorOptions().dtype(dtype));
    }
    void* data = static_cast<char*>(block_.get()) + used_ + misalignment;
    used_ += bytes;
    const std::shared_ptr<void> owner = block_;  // each tensor in the block keeps it mapped
    return torch::from_blob(data, sizes, [owner](void*) {}, torch::TensorOptions().dtype(dtype));
}

torch::Tensor HugePageArena::place(const torch::Tensor& t) { return slot(t.sizes(), t.scalar_type()).copy_(t); }

std::string transparentHugePagesMode() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (!std::getline(in, line)) return "unavailable";
    // "always [madvise] never": the bracketed word is the mode.
    const auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
    return line.substr(open + 1, close - open - 1);
}

std::string hugePagesSummary(const std::string& mode) {
    if (mode == "always" || mode == "madvise")
        return "transparent huge pages '" + mode + "'; the weights and the probe arrays alike advised onto 2 MiB pages";
    const std::string why = mode == "never" ? "'never'" : "not offered by this kernel";
    return "transparent huge pages " + why +
           ": the weights and the probe arrays stay on 4 KiB pages, which a decode step streams more slowly "
           "(26-34% on a Zen 4 VM); 'madvise' (as root: echo madvise > "
           "/sys/kernel/mm/transparent_hugepage/enabled) puts them on 2 MiB pages";
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
