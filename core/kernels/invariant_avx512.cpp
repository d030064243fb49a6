// SPDX-License-Identifier: MIT
// The fixed orders on AVX-512F: one 16-lane register; the tree folds the upper 256 bits onto the
// lower, then 128, 64, 32; the pair order as two FMAs. Compiled with -mavx512f; called only when
// the CPU has it.
#include "core/kernels/invariant_avx512_vec.h"

namespace kvscope::kernels {

const KernelPath& avx512Path() {
    static const KernelPath path = kernelPathOf<Avx512Vec>(Isa::Avx512);
    return path;
}

}  // namespace kvscope::kernels
