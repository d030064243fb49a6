// SPDX-License-Identifier: MIT
#pragma once
// Batch-invariant CPU kernels (`--kernels invariant`): every output element is reduced in one fixed
// order that depends only on the reduction length, never on how many rows, queries or threads share
// the call. So a prefill of N tokens, N decode steps, and any chunking in between give the same bits.
//
// The 16-lane order, for a reduction of length n (a dot product over the input features, or over a
// head's features for attention scores): 16 fp32 lanes, lane j accumulating the products of elements
// j, j+16, j+32, ... with fused multiply-adds, the input zero-padded to a multiple of 16; then the
// lanes summed as a fixed tree, l[j]+l[j+8], then +4, +2, +1. Softmax statistics and the weighted sum
// of values are reduced over keys 0, 1, 2, ... in order; e^x is the kernels' own (exps below). Work
// is split between threads only along outputs (features, rows, query heads), never along a reduction.
//
// The pair order, for a linear whose inputs and weights are both bf16 (the bf16 model's): the order
// of AVX-512 BF16's dot-product instruction VDPBF16PS. The input is zero-padded to a multiple of 32;
// in each chunk of 32, lane j adds the product of elements 2j+1, then of 2j, each with one rounding
// (bf16 products are exact in fp32, so an FMA); then the same tree. Denormals are flushed to zero,
// inputs and every rounded result, as that instruction does (DAZ, FTZ). Equivalently: the 16-lane
// order over the input permuted chunk by chunk (the 16 odd elements, then the 16 even ones), with
// the MXCSR's flush bits set, which is how the paths without the instruction compute it. Measured
// on an AMD EPYC (Zen 4): VDPBF16PS equals two such FMAs on 32 million random lanes, denormals
// included; the dispatcher checks it again on every CPU before using it (invariant_dispatch.cpp).
//
// The tile order, for the same linears on CPUs with AMX-BF16 (invariant_amx.cpp): the order of
// AMX's TDPBF16PS when one product of each pair is zero. The input is zero-padded to a multiple of
// 32; for each chunk of 32, its 16 even elements' products are summed from zero in order, one
// rounding each, and that sum added to the output's sum; then the 16 odd elements' likewise. Sums
// flushed to zero as the pair order's are (FTZ, DAZ). Measured on a Sapphire Rapids: TDPBF16PS so
// fed sums as said on 100% of 5 million random outputs of normal magnitude (scripts/probe-amx-order.c,
// "own sum" with one product zero), and an output is the same for 1 or 16 input rows
// (tile_order_test.cpp); where sums fall into the denormal range 99.98% (a throwaway variant of the
// probe; the rest not explained). Only the reference and AMX compute it (a vector path would need the
// weights transposed), so it is a choice of its own, `--kernels invariant-tiles`, whose bits differ
// from the pair order's; without AMX the reference computes it. The lm_head keeps the pair order
// there (core/model/transformer.cpp's head says why).
//
// The 16-lane and pair orders are implemented by every path, from one template (invariant_impl.h): a scalar reference
// (std::fma on a 16-float array), AVX2+FMA (two 8-lane registers), AVX-512F (one 16-lane register)
// and AVX-512 BF16 (AVX-512F, with VDPBF16PS for the pair order). Tests hold them equal bit for bit,
// so a CPU changes the speed, never the bits.
//
// Raw pointers, no libtorch: invariant_ops.h adapts tensors and threads.
#include <cstdint>

namespace kvscope::kernels {

enum class Isa { Scalar, Avx2, Avx512, Avx512Bf16 };
Isa bestIsa();                 // the widest path this CPU and this build can run
// The path for a bf16 x bf16 linear of `rows` rows on `isa`: the same, or the AVX-512F path (the
// pair order by FMAs on packed copies: the same bits) for many rows on a CPU whose VDPBF16PS
// issues at half the FMA rate (faster prefills there: docs/history/kernel-measurements.md, "Pairs
// on AMX CPUs"); decode rows keep VDPBF16PS.
Isa pairsPathForRows(Isa isa, int64_t rows);
// From how many rows a path without VDPBF16PS computes the pair order as panels (invariant_impl.h's
// linearPairs), which is also from where pairsPathForRows sends an AMX CPU's rows there.
constexpr int64_t kPairPanelFromRows = 32;
const char* isaName(Isa isa);  // "scalar", "avx2", "avx512", "avx512bf16"

// Which order a bf16 x bf16 linear takes (`--kernels invariant`: pairs; `invariant-tiles`: tiles).
enum class LinearOrder { Pairs, Tiles };
// The tile order (above): the reference, or TDPBF16PS where amxTilesUsable(); same arguments as
// the bf16 x bf16 linear.
enum class TilePath { Scalar, Amx };
// Whether this CPU has AMX-BF16 and the kernel grants this process AMX's tile state (Linux 5.16 on):
// TilePath::Amx runs. Usable: granted, and TDPBF16PS agrees with the reference on a fixed probe.
bool amxTilesGranted();
bool amxTilesUsable();
// The path the tile order takes: AMX where usable, unless KVSCOPE_KERNEL_PATH=scalar asks for the
// reference everywhere; the reference otherwise.
TilePath bestTilePath();
void linearTiles(TilePath path, const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y,
                 int64_t yStride, int64_t o0, int64_t o1);
// The bytes of weight panels a many-row linear keeps at once (invariant_impl.h's panelLinear): 5/8
// of this CPU's L2 cache (1 MiB where the C library does not say), leaving the rest to the rows.
int64_t cacheBytesForPanels();
// How far ahead of its reads (bytes) a decode row's weights are fetched into L2 on the AVX-512
// paths, which read them as one stream a thread: 8 KiB on Intel CPUs, 0 (the hardware prefetcher
// alone) elsewhere. KVSCOPE_DECODE_FETCH_BYTES=N sets it, to measure another distance (`kvscope
// bench`); fetching changes speed only, never the bits. Throws std::invalid_argument where that
// variable is not a whole number of bytes in [0, 1 MiB].
int64_t decodeFetchBytes();
// Whether `linear` over this many rows packs its weights into fp32 panels itself (the AVX2 path's
// outer-product form, invariant_impl.h), so that widening bf16 weights beforehand only costs time.
bool widensWeightsItself(Isa isa, int64_t rows);

// Causal attention over a KV cache, for the (query row, head) pairs [begin, end) of
// [S rows x Q heads], pair index = row * Q + head.
// q:   [S, Q, D] fp32 (after RoPE)     keys, values: [KV, *, D], head h of KV at + h * headStride
// out: [S, Q, D] fp32                  query row s sits at position start + s and sees keys [0, start + s]
// Keys side by side in AttentionArgs::keysInLanes: one per lane of the kernels' 16-lane vectors.
constexpr int64_t kKeysSideBySide = 16;
template <typename Element>
struct AttentionArgs {
    const float* q = nullptr;
    const Element* keys = nullptr;
    const Element* values = nullptr;
    int64_t headStride = 0;
    float* out = nullptr;
    int64_t S = 0, start = 0, Q = 0, KV = 0, D = 0;
    float scale = 1;  // D^-0.5
    // Null, or the keys [0, start + S) of each KV head as fp32 blocks of kKeysSideBySide keys (feature
    // d of key 16 b + c at (b * D + d) * 16 + c, zeros past the last key), KV head h's at
    // h * keysInLanesStride, as attentionInto (invariant_ops.cpp) lays them out for several queries.
    // The scores are then computed 16 keys at a time in the same order (invariant_attention_impl.h's
    // scoresOfKeysInLanes).
    const float* keysInLanes = nullptr;
    int64_t keysInLanesStride = 0;
};
// scores: scratch for kAttentionScratchRows * (start + S) floats (a key's score for each of up to
// that many heads computed together), owned by the calling thread.
constexpr int64_t kAttentionScratchRows = 4;
// One instruction-set path's raw-pointer kernels, bound once per path: each path's file fills its
// table from the templates every path shares (invariant_path.h's kernelPathOf), and callers take
// the table of the path they run: kernelPath(isa). Element: float (fp32) or uint16_t (bf16 bits).
template <typename Element>
struct ElementKernels {
    // y[r * yStride + o] = dot(x[r], w[o]) for rows [0, rows) and outputs [o0, o1). x: [rows, in]
    // fp32; w: [out, in] of this element type. packedRows: x packed by packRowTiles for this path,
    // or null (a path that packs many rows packs them itself, for its outputs alone).
    void (*linear)(const float* x, int64_t rows, int64_t in, const Element* w, float* y, int64_t yStride, int64_t o0,
                   int64_t o1, const float* packedRows);
    // Tiles [tile0, tile1) of a many-row linear's rows, packed once for all the threads that share
    // its outputs (invariant_impl.h's PackedRows); bf16 rows are the pair order's.
    void (*packRowTiles)(const Element* x, int64_t rows, int64_t in, int64_t tile0, int64_t tile1, float* out);
    // Causal attention over a KV cache of this element type (AttentionArgs above).
    void (*attention)(const AttentionArgs<Element>& args, int64_t begin, int64_t end, float* scores);
    // The elementwise steps around the kernels, each IEEE fp32 operation of the torch ops they
    // replace in turn, results rounded to bf16 as c10::BFloat16 does (nearest even; a NaN to
    // 0x7FC0). out[i] = x[i] + bias[i] (bias may be null), rounded to bf16:
    void (*finishSums)(const float* x, const Element* bias, uint16_t* out, int64_t n);
    // out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g) with exps' e^x:
    void (*siluGate)(const Element* gate, const Element* up, Element* out, int64_t n);
    // out[i] = x[i] + a[i], the residual add (out may be x):
    void (*add)(const Element* x, const Element* a, Element* out, int64_t n);
    // RMSNorm's last step, out[i] = weight[i] * cast(x[i] * scale):
    void (*scaleByWeight)(const float* x, float scale, const Element* weight, Element* out, int64_t n);
    // RoPE (rotate-half) on `rows` rows of `heads` heads of D features, row s at angles
    // cosines[s * D/2], sines[s * D/2]: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), x1 = x[i],
    // x2 = x[i + D/2] (out may be x):
    void (*rope)(const Element* x, Element* out, int64_t rows, int64_t heads, int64_t D, const float* cosines,
                 const float* sines);
};

struct KernelPath {
    Isa isa;
    ElementKernels<float> f32;
    ElementKernels<uint16_t> bf16;
    // The same linear with bf16 inputs and weights, both raw uint16 bits: the pair order.
    void (*linearPairs)(const uint16_t* x, int64_t rows, int64_t in, const uint16_t* w, float* y, int64_t yStride,
                        int64_t o0, int64_t o1, const float* packedRows);
    // How many floats a many-row linear's packed rows take (0: this path packs nothing for so
    // many rows), and in how many tiles. pairs: bf16 rows and weights (the pair order).
    int64_t (*packedRowsFloats)(int64_t rows, int64_t in, bool pairs);
    int64_t (*packedRowTiles)(int64_t rows);
    // sum_i x[i]^2 in the fixed order above (RMSNorm's statistic).
    float (*sumOfSquares)(const float* x, int64_t n);
    // y[i] = e^(x[i] - shift): the kernels' own exp (invariant_attention_impl.h's expOf), for softmax
    // and SiLU; the same bits on every path and with every C library.
    void (*exps)(const float* x, float shift, float* y, int64_t n);
    // Memory-bandwidth probes for `kvscope bench`, vectorised like the kernels they bound (a plain
    // C++ loop compiles to scalar code at -O2 and under-reads the machine). n: a multiple of 64.
    // a = b + s * c:
    void (*triad)(float* a, const float* b, const float* c, float s, int64_t n);
    // Reads x once as `streams` sequential streams side by side (n: a multiple of 64 * streams), as a
    // decode step reads its weights (each path's kDecodeStreams).
    float (*readAll)(const float* x, int64_t n, int64_t streams);
    // The arithmetic ceiling of the path, for `kvscope bench`: `rounds` rounds of independent steps
    // on values held in registers, as many chains as the path's linear tile keeps (no memory
    // traffic), in the pair order (VDPBF16PS, or its two FMAs) or the 16-lane order (one FMA per
    // lane). Returns the multiply-adds done (32 per pair step, 16 per lane step); `sink` gets a sum
    // that keeps them observable.
    int64_t (*multiplyAdds)(int64_t rounds, bool pairs, float* sink);
    // From how many rows a linear widens bf16 weights into fp32 panels itself (0: never).
    int64_t panelFromRows;

    template <typename Element>
    const ElementKernels<Element>& of() const;
};
template <>
inline const ElementKernels<float>& KernelPath::of<float>() const {
    return f32;
}
template <>
inline const ElementKernels<uint16_t>& KernelPath::of<uint16_t>() const {
    return bf16;
}
// The table of `isa`'s path; std::logic_error where this CPU cannot run it.
const KernelPath& kernelPath(Isa isa);
// Each path's table, defined in its file (invariant_scalar.cpp, invariant_avx2.cpp, ...; the x86
// ones only in x86 builds); kernelPath checks that the CPU runs it.
const KernelPath& scalarPath();
const KernelPath& avx2Path();
const KernelPath& avx512Path();
const KernelPath& avx512bf16Path();

}  // namespace kvscope::kernels
