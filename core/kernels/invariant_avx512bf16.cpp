// SPDX-License-Identifier: MIT
// AVX-512F with the BF16 dot product: the pair order in VDPBF16PS, everything else as the AVX-512F
// path. Compiled with -mavx512f -mavx512bf16; called only when the CPU has both and its VDPBF16PS
// passed the dispatcher's check.
#include "core/kernels/invariant_avx512_vec.h"

#ifndef __AVX512BF16__
#error "invariant_avx512bf16.cpp must be compiled with -mavx512bf16"
#endif

namespace kvscope::kernels {

const KernelPath& avx512bf16Path() {
    static const KernelPath path = kernelPathOf<Avx512Vec>(Isa::Avx512Bf16);
    return path;
}

}  // namespace kvscope::kernels
