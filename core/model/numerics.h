// SPDX-License-Identifier: MIT
#pragma once
// How a Transformer computes: which kernels, and so which bits. No libtorch here, so experiment
// configurations and widgets can name the choice without tensor headers.
#include <string>
#include <vector>

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

// Where a forward leaves the model's dtype: the remedies practitioners apply to a bf16 model's
// training-inference mismatch (verl's fp32 lm_head; LayerCast, "bf16 storage, fp32 compute").
enum class MixedPrecision {
    None,              // every op in the model's dtype
    Fp32Head,          // a bf16 or fp16 model whose last hidden state goes through the final norm and the
                       // lm_head in fp32, with those two weights read from the checkpoint in fp32
    Bf16RoundedWeights,  // an fp32 model whose weights are rounded to bf16 at load (LayerCast): every
                         // product and sum in fp32 over bf16 values
};
std::string mixedPrecisionName(MixedPrecision mixed);  // "none" | "fp32-head" | "bf16-rounded-weights"

// A named precision of the study's and the replay's what-ifs: the compute dtype and how a forward
// leaves it. "bf16", "fp32", "fp16", "bf16-lmhead-fp32" (bf16, Fp32Head), "layercast" (fp32,
// Bf16RoundedWeights).
struct Precision {
    std::string dtype = "bf16";  // a parseDtype name: "bf16" | "fp32" | "fp16"
    MixedPrecision mixed = MixedPrecision::None;
    std::string name() const;
};
Precision parsePrecision(const std::string& name);  // throws UsageError naming the choices
const std::vector<std::string>& precisionNames();   // every name parsePrecision takes

struct Numerics {
    Kernels kernels = Kernels::Torch;
    MixedPrecision mixed = MixedPrecision::None;
    // Torch kernels only: a decode step's projections as matrix-vector products (torch::mv) instead
    // of transformers' F.linear on one row: about twice as fast on CPU, other low bits.
    bool matrixVectorDecode = false;
};

}  // namespace kvscope
