// SPDX-License-Identifier: MIT
#pragma once
// How a Transformer computes: which kernels, and so which bits. No libtorch here, so experiment
// configurations and widgets can name the choice without tensor headers.
#include <string>

namespace kvscope {

// Which kernels compute the forward. The default is Hugging Face transformers' eager op sequence,
// bit for bit on the same torch (tests/parity/hf_parity.py checks it); anything faster that gives
// other bits is an explicit choice here, and part of the model's fingerprint, so a cache built one
// way is never continued the other way.
enum class Kernels {
    Torch,      // transformers' op sequence on libtorch's kernels: its bits, and its batch dependence
    Invariant,  // kvscope's batch-invariant kernels (core/kernels): a row's bits never depend on
                // how many rows a call computes, so live == prefill == chunked == incremental; a bf16
                // model's linears in the pair order, the same bits on every CPU
    InvariantTiles,  // the same, a bf16 model's layers' linears in the tile order (core/kernels/
                     // invariant.h; the lm_head keeps the pair order): AMX's, ~2x the bf16 prefill
                     // on CPUs with AMX-BF16, other bits than Invariant's; without AMX the kernels'
                     // scalar reference computes it (for tests and for replaying such runs
                     // elsewhere: slow)
};
std::string kernelsName(Kernels kernels);           // "torch" | "invariant" | "invariant-tiles"
Kernels parseKernels(const std::string& name);      // throws UsageError naming the choices
// Invariant or InvariantTiles: a prefill gives the live cache's bits.
inline bool isInvariant(Kernels kernels) { return kernels != Kernels::Torch; }

struct Numerics {
    Kernels kernels = Kernels::Torch;
    // Torch kernels only: a decode step's projections as matrix-vector products (torch::mv) instead
    // of transformers' F.linear on one row: about twice as fast on CPU, other low bits.
    bool matrixVectorDecode = false;
};

}  // namespace kvscope
