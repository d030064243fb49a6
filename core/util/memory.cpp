// SPDX-License-Identifier: MIT
#include "core/util/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvscope {

bool keepFreedMemoryForReuse() {
#if defined(__GLIBC__)
    constexpr int kHeapUpTo = 64 << 20, kKeepFreeUpTo = 512 << 20;
    // Setting either threshold also stops glibc from adjusting them itself.
    return mallopt(M_MMAP_THRESHOLD, kHeapUpTo) == 1 && mallopt(M_TRIM_THRESHOLD, kKeepFreeUpTo) == 1;
#else
    return false;
#endif
}

}  // namespace kvscope
