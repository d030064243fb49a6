// SPDX-License-Identifier: MIT
// The forward pass, top to bottom. Shapes use S = new tokens in this call, T = cache length after
// it, H = hidden size, Q = query heads, KV = key/value heads, G = Q/KV (group size), D = head dim,
// I = intermediate size, V = vocabulary. Numerics follow Hugging Face transformers' eager
// implementation op for op, since kvscope's question is about *their* bits (tests/parity/hf_parity.py
// compares logits and caches bit for bit): norms in fp32 then cast back, softmax in fp32, matmuls in
// the compute dtype, the same kernels for the same shapes.
#include "core/model/transformer.h"

#include "core/cache/fingerprint.h"
#include "core/kernels/invariant_ops.h"
#include "core/model/checkpoint.h"
#include "core/util/error.h"
#include "core/util/huge_pages.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

namespace kvscope {

namespace {
// Sequence axis of each op's output as written below: 0 for [S, ...], 1 for [heads, S, D] and
// [Q, S, T].
void observe(ForwardObserver* o, int64_t layer, const char* op, const torch::Tensor& t, int64_t seqAxis = 0) {
    if (o) o->onOp(layer, op, t, seqAxis);
}
// K or V of the KV heads repeated for the G query heads that share each (transformers' repeat_kv):
// [KV, T, D] -> [KV*G, T, D], contiguous, in transformers' memory layout.
torch::Tensor repeatKv(const torch::Tensor& x, int64_t G) {
    if (G == 1) return x.contiguous();
    return x.unsqueeze(1).expand({x.size(0), G, x.size(1), x.size(2)}).reshape({x.size(0) * G, x.size(1), x.size(2)});
}
// KVSCOPE_DECODE_FETCH_BYTES is read once, by the first decode step; a bad value is reported when
// the model is made, not in the middle of a generation.
void checkDecodeFetchSetting() {
    try {
        kernels::decodeFetchBytes();
    } catch (const std::invalid_argument& e) {
        throw UsageError(e.what());
    }
}
}  // namespace

// ---- small pieces ------------------------------------------------------------------------------

torch::Tensor rmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    // x: [..., n]  weight: [n]
    torch::Tensor xf = x.to(torch::kFloat32);
    torch::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
    xf = xf * torch::rsqrt(variance + eps);
    return weight * xf.to(x.scalar_type());
}

torch::Tensor ropeInverseFrequencies(const ModelConfig& c) {
    // inv_freq[i] = 1 / theta^(2i/D), computed in fp32 as HF does. Python evaluates `scalar / tensor`
    // as tensor.reciprocal() * scalar (two roundings; C++'s operator/ divides once), so every such
    // quotient below is written that way to give transformers' bits.
    auto exponents = torch::arange(0, c.headDim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(c.headDim);
    torch::Tensor invFreq = torch::pow(c.ropeTheta, exponents).reciprocal();
    if (c.ropeScaling.type != RopeType::Llama3) return invFreq;

    // Llama 3.1 frequency-dependent scaling: long wavelengths slowed by `factor`, short ones kept,
    // a smooth blend in between.
    const auto& s = c.ropeScaling;
    const double oldContext = static_cast<double>(s.originalMaxPositionEmbeddings);
    const double lowFreqWavelen = oldContext / s.lowFreqFactor;
    const double highFreqWavelen = oldContext / s.highFreqFactor;
    torch::Tensor wavelen = invFreq.reciprocal() * (2.0 * M_PI);                          // 2 * pi / inv_freq
    torch::Tensor scaled = torch::where(wavelen > lowFreqWavelen, invFreq / s.factor, invFreq);
    torch::Tensor smooth = (wavelen.reciprocal() * oldContext - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
    torch::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    torch::Tensor isMedium = (wavelen >= highFreqWavelen).logical_and(wavelen <= lowFreqWavelen);
    return torch::where(isMedium, smoothed, scaled);
}

torch::Tensor applyRope(const torch::Tensor& x, const torch::Tensor& invFreq, int64_t start) {
    return applyRopeAt(x, invFreq, torch::arange(start, start + x.size(1), invFreq.options()));
}

torch::Tensor applyRopeAt(const torch::Tensor& x, const torch::Tensor& invFreq, const torch::Tensor& positions) {
    // x: [heads, S, D]   invFreq: [D/2] fp32   positions: [S] fp32
    torch::Tensor freqs = torch::outer(positions, invFreq);                              // [S, D/2]
    torch::Tensor angles = torch::cat({freqs, freqs}, -1);                               // [S, D]
    torch::Tensor cos = angles.cos().to(x.scalar_type());                                // [S, D]
    torch::Tensor sin = angles.sin().to(x.scalar_type());
    // rotate_half(x) = cat(-x2, x1) where x1, x2 are the two halves of the last dim
    const int64_t half = x.size(-1) / 2;
    torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return x * cos + rotated * sin;                                                      // [heads, S, D]
}

torch::Tensor Transformer::rmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
    if (invariant()) return kernels::rmsNorm(x, weight, config_.rmsNormEps);
    return kvscope::rmsNorm(x, weight, config_.rmsNormEps);
}

// x: [S, in]  w: [out, in]  b: [out] or undefined  ->  [S, out]
// transformers' nn.Linear (F.linear: addmm with a bias, mm without) for any number of rows, a decode
// step's single row included. A matrix-vector product runs that row at close to memory bandwidth,
// about twice as fast here, but accumulates in another order and so gives other low bits: it is
// Numerics::matrixVectorDecode, never the default.
torch::Tensor Transformer::project(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const {
    if (invariant()) return kernels::linear(x, w, b, x.scalar_type(), kernels::bestIsa(), linearOrder());
    if (x.size(0) == 1 && numerics_.matrixVectorDecode) {
        torch::Tensor y = torch::mv(w, x[0]);
        if (b.defined()) y = y + b;
        return y.unsqueeze(0);
    }
    return b.defined() ? torch::linear(x, w, b) : torch::linear(x, w);
}

// ---- construction -------------------------------------------------------------------------------

struct Transformer::FingerprintMemo {
    std::once_flag once;
    std::string value;
};

Transformer::Transformer(ModelConfig config, Weights weights, torch::ScalarType dtype, torch::Device device,
                         Numerics numerics)
    : config_(std::move(config)), weights_(std::move(weights)), dtype_(dtype), device_(device), numerics_(numerics),
      fingerprint_(std::make_shared<FingerprintMemo>()) {
    if (invariant() && !device_.is_cpu())
        throw UsageError(
            "--kernels invariant runs on the CPU only (its kernels are kvscope's own C++); use --device cpu");
    checkKernelsTakeDtype(numerics_.kernels, dtype_);
    if (invariant() && numerics_.matrixVectorDecode)
        throw UsageError("--decode-kernel mv applies to --kernels torch only (invariant kernels have one decode path)");
    if (invariant()) checkDecodeFetchSetting();
    invFreq_ = ropeInverseFrequencies(config_).to(device_);
    decodesOnRows_ = invariant() && weightsFitRowDecode();
}

const std::string& Transformer::fingerprint() const {
    std::call_once(fingerprint_->once, [this] {
        std::vector<std::pair<std::string, torch::Tensor>> named = {{"embed", weights_.embed}};
        for (std::size_t l = 0; l < weights_.layers.size(); ++l) {
            const LayerWeights& w = weights_.layers[l];
            const std::string p = std::to_string(l) + ".";
            // clang-format off: one name per line would make this table 14 lines long
            for (const auto& [name, t] : {std::pair{"in_norm", w.inputNorm}, {"wq", w.wq}, {"bq", w.bq}, {"wk", w.wk},
                                          {"bk", w.bk}, {"wv", w.wv}, {"bv", w.bv}, {"q_norm", w.qNorm},
                                          {"k_norm", w.kNorm}, {"wo", w.wo}, {"bo", w.bo}, {"post_norm", w.postNorm},
                                          {"gate", w.wGate}, {"up", w.wUp}, {"down", w.wDown}})
                if (t.defined()) named.emplace_back(p + name, t);
            // clang-format on
        }
        named.emplace_back("final_norm", weights_.finalNorm);
        named.emplace_back(config_.tieWordEmbeddings ? "lm_head=embed" : "lm_head", weights_.lmHead);
        // Only non-default numerics enter, so fingerprints of default models stay what they were.
        if (numerics_.matrixVectorDecode) named.emplace_back("numerics=matrix-vector-decode", torch::zeros({0}));
        if (invariant()) named.emplace_back("numerics=invariant-kernels", torch::zeros({0}));
        // bf16 linears moved from the 16-lane order to the pair order (core/kernels/invariant.h):
        // a cache an older kvscope built that way holds other bits, and is refused as another model's.
        if (invariant() && dtype_ == torch::kBFloat16)
            named.emplace_back(linearOrder() == kernels::LinearOrder::Tiles ? "numerics=invariant-bf16-tile-order"
                                                                            : "numerics=invariant-bf16-pair-order",
                               torch::zeros({0}));
        // Softmax and SiLU moved from libm's expf to the kernels' own exp (invariant_attention_impl.h).
        if (invariant()) named.emplace_back("numerics=invariant-own-exp", torch::zeros({0}));
        if (numerics_.mixed != MixedPrecision::None)
            named.emplace_back("numerics=" + mixedPrecisionName(numerics_.mixed), torch::zeros({0}));
        fingerprint_->value = fingerprintNamedTensors(named);
    });
    return fingerprint_->value;
}

KvCache Transformer::newCache(int64_t capacity) const {
    KvCache cache = KvCache::forModel(config_, dtype_, device_, capacity);
    cache.setKernels(numerics_.kernels);
    return cache;
}

Transformer Transformer::load(const std::string& dir, torch::ScalarType dtype, torch::Device device, LoadReport* report,
                              Numerics numerics) {
    checkKernelsTakeDtype(numerics.kernels, dtype);
    if (dtype == torch::kFloat16 && device.is_cpu() && !cpuMultipliesFp16())
        throw UsageError(
            "--dtype fp16 on CPU needs a libtorch with fp16 matrix multiplies there (PyTorch 2.x's; "
            "this is libtorch " TORCH_VERSION "): use bf16 or fp32, or --device cuda");
    checkMixedPrecision(numerics.mixed, dtype);
    if (device.is_cuda() && !torch::cuda::is_available())
        throw UsageError("--device cuda requested, but this libtorch build sees no CUDA device");
    Checkpoint ck = Checkpoint::open(dir);
    auto unused = ck.validate();
    if (report) report->unusedTensors = unused;

    const ModelConfig& c = ck.config();
    Weights w;
    const auto slots = hfWeightSlots(c, w);
    // On the CPU every weight is read straight into one block on 2 MiB pages (decode streams them all
    // from memory: util/huge_pages.h), converted on the way in: no temporary copy of a tensor to free
    // afterwards. Freed, a large one (a 0.5B model's embedding: 272 MB in bf16, another 544 MB
    // converted to fp32) went back to the kernel, and on a VM that reports free pages to its host
    // that work slowed the next seconds' decode steps (bench/benchmark.cpp has the figures).
    // transformers uses a tensor stored in the run's dtype where the mapped file has it; MKL's fp32
    // products (without MKL_CBWR) choose their kernel by the weight's address modulo 16, so with
    // torch kernels each such weight is placed at its file offset's alignment, as there (the
    // decode steps of a checkpoint transformers wrote, SmolLM2's at 40 mod 64, gave other bits at
    // 64-byte alignment). Converted weights are fresh 64-byte-aligned copies on both sides.
    auto misalignment = [&](const std::string& name) -> std::size_t {
        const auto offset = ck.fileOffsetAsStored(name, dtype);
        return offset && numerics.kernels == Kernels::Torch ? *offset % 64 : 0;
    };
    std::size_t bytes = 0;
    auto footprint = [&](const std::string& name) {
        return HugePageArena::footprint(c10::multiply_integers(ck.shape(name)), dtype, misalignment(name));
    };
    const bool fp32Head = numerics.mixed == MixedPrecision::Fp32Head;
    for (const auto& [name, slot] : slots) bytes += footprint(name);
    if (!c.tieWordEmbeddings && !fp32Head) bytes += footprint("lm_head.weight");
    HugePageArena arena(device.is_cpu() ? bytes : 0);
    auto read = [&](const std::string& name) {
        if (!device.is_cpu()) return ck.read(name, dtype).to(device);
        torch::Tensor t = arena.slot(ck.shape(name), dtype, misalignment(name));
        ck.readInto(name, t);
        return t;
    };
    for (const auto& [name, slot] : slots) *slot = read(name);
    if (fp32Head) {  // the checkpoint's values in fp32, not the compute dtype's rounding of them
        w.finalNorm = ck.read("model.norm.weight", torch::kFloat32).to(device);
        w.lmHead =
            ck.read(c.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight", torch::kFloat32).to(device);
    } else {
        w.lmHead = c.tieWordEmbeddings ? w.embed : read("lm_head.weight");
    }
    if (numerics.mixed == MixedPrecision::Bf16RoundedWeights) {
        for (const auto& [name, slot] : slots) slot->copy_(slot->to(torch::kBFloat16));
        if (!c.tieWordEmbeddings) w.lmHead.copy_(w.lmHead.to(torch::kBFloat16));
    }
    return Transformer(c, std::move(w), dtype, device, numerics);
}

bool cpuMultipliesFp16() {
    static const bool supported = [] {
        try {
            const torch::Tensor a = torch::ones({2, 2}, torch::kFloat16);
            (void)torch::linear(a, a);
            return true;
        } catch (const c10::Error&) {  // libtorch 1.13: "addmm_impl_cpu_" not implemented for 'Half'
            return false;
        }
    }();
    return supported;
}

void checkKernelsTakeDtype(Kernels kernels, torch::ScalarType dtype) {
    if (isInvariant(kernels) && dtype == torch::kFloat16)
        throw UsageError("--kernels invariant computes bf16 and fp32 models; fp16 runs on --kernels torch");
}

void checkMixedPrecision(MixedPrecision mixed, torch::ScalarType dtype) {
    if (mixed == MixedPrecision::Fp32Head && dtype == torch::kFloat32)
        throw UsageError("an fp32 lm_head is a bf16 or fp16 model's remedy: this model computes in fp32 already");
    if (mixed == MixedPrecision::Bf16RoundedWeights && dtype != torch::kFloat32)
        throw UsageError("bf16-rounded weights (LayerCast) compute in fp32: load the model in fp32, not " +
                         dtypeName(dtype));
}

std::vector<std::pair<std::string, torch::Tensor*>> hfWeightSlots(const ModelConfig& c, Weights& w) {
    w.layers.resize(static_cast<std::size_t>(c.numLayers));
    std::vector<std::pair<std::string, torch::Tensor*>> slots = {{"model.embed_tokens.weight", &w.embed}};
    for (int64_t l = 0; l < c.numLayers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        LayerWeights& lw = w.layers[static_cast<std::size_t>(l)];
        slots.insert(slots.end(), {{p + "input_layernorm.weight", &lw.inputNorm},
                                   {p + "self_attn.q_proj.weight", &lw.wq},
                                   {p + "self_attn.k_proj.weight", &lw.wk},
                                   {p + "self_attn.v_proj.weight", &lw.wv}});
        if (c.attentionBias)
            slots.insert(slots.end(), {{p + "self_attn.q_proj.bias", &lw.bq},
                                       {p + "self_attn.k_proj.bias", &lw.bk},
                                       {p + "self_attn.v_proj.bias", &lw.bv}});
        if (c.qkNorm)
            slots.insert(slots.end(),
                         {{p + "self_attn.q_norm.weight", &lw.qNorm}, {p + "self_attn.k_norm.weight", &lw.kNorm}});
        slots.emplace_back(p + "self_attn.o_proj.weight", &lw.wo);
        if (c.outputBias) slots.emplace_back(p + "self_attn.o_proj.bias", &lw.bo);
        slots.insert(slots.end(), {{p + "post_attention_layernorm.weight", &lw.postNorm},
                                   {p + "mlp.gate_proj.weight", &lw.wGate},
                                   {p + "mlp.up_proj.weight", &lw.wUp},
                                   {p + "mlp.down_proj.weight", &lw.wDown}});
    }
    slots.emplace_back("model.norm.weight", &w.finalNorm);
    return slots;
}

// ---- the forward pass ---------------------------------------------------------------------------

// Where the S new rows of a forward sit. Inference: positions [start, start+S) after a cache that
// they extend, causal mask. Training: packed sequences with their own positions and a block-causal
// mask, no cache.
struct Transformer::Span {
    int64_t start = 0;          // keys before the new rows (the cache length), 0 when packed
    torch::Tensor positions;    // [S] fp32 rotary positions
    torch::Tensor hidden;       // [S, start+S] bool, true = masked; undefined when S == 1
    kernels::RopeAngles angles; // invariant kernels: RoPE's cos and sin, once for every layer
    KvCache* cache = nullptr;   // appended to and read back; null: attend to the new rows only
    bool lastLayerOnLastRow = false;  // the last layer takes its other rows only to their K and V
};

void Transformer::checkIds(const std::vector<int64_t>& ids) const {
    if (ids.empty()) throw UsageError("forward() needs at least one token id");
    for (int64_t id : ids)
        if (id < 0 || id >= config_.vocabSize)
            throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(config_.vocabSize) + ")");
}

torch::Tensor Transformer::forward(const std::vector<int64_t>& ids, KvCache& cache, Logits which,
                                   ForwardObserver* observer) const {
    checkIds(ids);
    if (cache.numLayers() != config_.numLayers || cache.dtype() != dtype_ || cache.numKvHeads() != config_.numKvHeads)
        throw UsageError("KV cache does not belong to this model (layers, KV heads or dtype differ)");
    const int64_t start = cache.length();
    const int64_t S = static_cast<int64_t>(ids.size());
    if (start + S > config_.maxPositionEmbeddings)
        throw UsageError("positions " + std::to_string(start) + ".." + std::to_string(start + S - 1) +
                         " reach past the model's max_position_embeddings (" +
                         std::to_string(config_.maxPositionEmbeddings) + ")");
    cache.reserve(start + S);
    if (S == 1 && decodesOnRows_ && observer == nullptr && cache.device().is_cpu()) {  // no op to observe
        torch::Tensor logits = decodeOnRows(ids.front(), cache);                           // [1, V]
        cache.commit(ids);
        return logits;
    }

    Span span;
    span.start = start;
    span.positions = torch::arange(start, start + S, invFreq_.options());                  // [S]
    if (S > 1)  // causal: the query at position start+i sees keys [0, start+i]
        span.hidden = torch::ones({S, start + S}, torch::TensorOptions().dtype(torch::kBool).device(device_))
                          .triu(start + 1);                                               // [S, T]
    span.cache = &cache;
    if (invariant()) span.angles = kernels::ropeAngles(invFreq_, start, S);
    // Where only the last position's logits are read and no observer sees the ops, the invariant
    // kernels let the last layer take its other rows only as far as their K and V: a row's bits do
    // not depend on which rows share a call, so the cache and the logits are the same, for about
    // 1/layers less work (512-token bf16 prefills of a 24-layer model: 2.8-3.5% shorter). Torch
    // kernels cannot: a product of one row rounds otherwise than the same row inside a GEMM.
    span.lastLayerOnLastRow = invariant() && which == Logits::Last && observer == nullptr;

    torch::Tensor tokens = torch::tensor(ids, torch::TensorOptions().dtype(torch::kInt64)).to(device_);  // [S]
    torch::Tensor x = torch::embedding(weights_.embed, tokens);                           // [S, H]
    observe(observer, -1, "embedding", x);
    x = blocks(x, span, observer);                                                        // [S, H]
    cache.commit(ids);
    if (which == Logits::Last) x = x.narrow(0, x.size(0) - 1, 1);                         // [1, H]
    return head(x, observer);                                                             // [S or 1, V]
}

torch::Tensor Transformer::forwardPacked(const std::vector<int64_t>& ids,
                                         const std::vector<int64_t>& sequenceStarts) const {
    if (invariant()) throw UsageError("training runs with --kernels torch (the invariant kernels have no gradients)");
    checkIds(ids);
    const int64_t S = static_cast<int64_t>(ids.size());
    if (sequenceStarts.empty() || sequenceStarts.front() != 0 ||
        !std::is_sorted(sequenceStarts.begin(), sequenceStarts.end()) || sequenceStarts.back() >= S)
        throw UsageError("forwardPacked(): sequence starts must begin at 0, increase, and lie inside the ids");
    // segment[i] = which sequence row i belongs to; position = offset inside it.
    std::vector<int64_t> segment(S), position(S);
    for (std::size_t k = 0; k < sequenceStarts.size(); ++k) {
        const int64_t end = k + 1 < sequenceStarts.size() ? sequenceStarts[k + 1] : S;
        for (int64_t i = sequenceStarts[k]; i < end; ++i) {
            segment[i] = static_cast<int64_t>(k);
            position[i] = i - sequenceStarts[k];
        }
    }
    auto onDevice = torch::TensorOptions().dtype(torch::kInt64);
    torch::Tensor seg = torch::tensor(segment, onDevice).to(device_);                     // [S]
    Span span;
    span.positions = torch::tensor(position, onDevice).to(device_).to(torch::kFloat32);   // [S]
    torch::Tensor later = torch::ones({S, S}, torch::TensorOptions().dtype(torch::kBool).device(device_)).triu(1);
    span.hidden = later.logical_or(seg.unsqueeze(1) != seg.unsqueeze(0));                 // [S, S]

    torch::Tensor tokens = torch::tensor(ids, onDevice).to(device_);                      // [S]
    torch::Tensor x = torch::embedding(weights_.embed, tokens);                           // [S, H]
    return head(blocks(x, span, nullptr), nullptr);                                       // [S, V]
}

torch::Tensor Transformer::blocks(torch::Tensor x, const Span& span, ForwardObserver* observer) const {
    for (int64_t l = 0; l < config_.numLayers; ++l) {
        const LayerWeights& lw = weights_.layers[l];
        // Pre-norm attention block with residual.
        torch::Tensor h = rmsNorm(x, lw.inputNorm);                                       // [S, H]
        observe(observer, l, "input_norm", h);
        // The rows that go on past this layer's K and V: all, or the last (Span::lastLayerOnLastRow).
        const int64_t S = x.size(0), rows = l + 1 == config_.numLayers && span.lastLayerOnLastRow ? 1 : S;
        x = residual(x.narrow(0, S - rows, rows), attention(l, h, span, rows, observer));  // [rows, H]
        observe(observer, l, "attn_residual", x);
        // Pre-norm MLP block with residual.
        h = rmsNorm(x, lw.postNorm);                                                      // [S, H]
        observe(observer, l, "post_norm", h);
        x = residual(x, mlp(l, h, observer));                                             // [S, H]
        observe(observer, l, "mlp_residual", x);
    }
    return x;
}

torch::Tensor Transformer::residual(const torch::Tensor& x, const torch::Tensor& block) const {
    if (invariant()) return kernels::add(x, block);
    return x + block;
}

torch::Tensor Transformer::head(torch::Tensor x, ForwardObserver* observer) const {
    if (numerics_.mixed == MixedPrecision::Fp32Head) x = x.to(torch::kFloat32);           // [S, H] fp32
    x = rmsNorm(x, weights_.finalNorm);                                                   // [S, H]
    observe(observer, -1, "final_norm", x);
    // Invariant kernels give fp32 logits straight from their fp32 sums; transformers rounds them to
    // the compute dtype first. The lm_head always takes the pair order: a prefill computes one row of
    // it, so the tile order would only slow decode steps down (its tile loads stream the 272 MB of
    // a 0.5B model's lm_head slower than the pair order's vector loads).
    torch::Tensor logits = invariant() ? kernels::linear(x, weights_.lmHead, {}, torch::kFloat32, kernels::bestIsa(),
                                                         kernels::LinearOrder::Pairs)
                                       : project(x, weights_.lmHead).to(torch::kFloat32);  // [S, V]
    observe(observer, -1, "logits", logits);
    return logits;
}

torch::Tensor Transformer::attention(int64_t l, const torch::Tensor& x, const Span& span, int64_t queries,
                                     ForwardObserver* observer) const {
    if (invariant()) return invariantAttention(l, x, span, queries, observer);
    const LayerWeights& lw = weights_.layers[l];
    const int64_t S = x.size(0), Q = config_.numHeads, KV = config_.numKvHeads, D = config_.headDim;
    if (queries != S) throw std::logic_error("torch kernels compute every row (Span::lastLayerOnLastRow)");
    const int64_t G = Q / KV, T = span.start + S;

    // Projections: [S, H] -> [S, heads, D]. Kept as three products, like HF's three Linear modules:
    // fusing them (tried) is faster to prefill but changes which bits depend on how many rows a
    // GEMM has, so prompt rows of a live cache stop matching a one-shot prefill's.
    torch::Tensor q = project(x, lw.wq, lw.bq).view({S, Q, D});
    torch::Tensor k = project(x, lw.wk, lw.bk).view({S, KV, D});
    torch::Tensor v = project(x, lw.wv, lw.bv).view({S, KV, D});
    observe(observer, l, "q_proj", q);
    observe(observer, l, "k_proj", k);
    observe(observer, l, "v_proj", v);
    if (config_.qkNorm) {  // Qwen3: RMSNorm over each head's D features, before RoPE
        q = rmsNorm(q, lw.qNorm);
        k = rmsNorm(k, lw.kNorm);
        observe(observer, l, "q_norm", q);
        observe(observer, l, "k_norm", k);
    }
    // Heads first, then rotary position embedding at the rows' absolute positions.
    q = applyRopeAt(q.transpose(0, 1), invFreq_, span.positions);                         // [Q, S, D]
    k = applyRopeAt(k.transpose(0, 1), invFreq_, span.positions);                         // [KV, S, D]
    v = v.transpose(0, 1);                                                                // [KV, S, D]
    observe(observer, l, "rope_q", q, 1);
    observe(observer, l, "rope_k", k, 1);

    // Append to the cache and read the whole history back (views, no copy).
    torch::Tensor keys = k, values = v;                                                   // [KV, T, D]
    if (span.cache) {
        span.cache->write(l, k, v);
        keys = span.cache->keys(l, T);
        values = span.cache->values(l, T);
    }

    // transformers' eager_attention_forward, op for op: K and V repeated to the Q heads, one batched
    // product per head, scaled by D^-0.5, masked, softmax in fp32, cast back. (Sharing one product
    // between the G query heads of a KV head skips the copy but changes the GEMM shapes, and so
    // which bits come out.)
    torch::Tensor keysQ = repeatKv(keys, G), valuesQ = repeatKv(values, G);               // [Q, T, D]
    torch::Tensor scores =
        torch::matmul(q, keysQ.transpose(1, 2)) * std::pow(static_cast<double>(D), -0.5);  // [Q, S, T]
    if (span.hidden.defined()) scores = scores.masked_fill(span.hidden, -std::numeric_limits<float>::infinity());
    observe(observer, l, "scores", scores, 1);
    torch::Tensor probs = torch::softmax(scores, -1, torch::kFloat32).to(x.scalar_type()); // [Q, S, T]
    observe(observer, l, "softmax", probs, 1);
    torch::Tensor out = torch::matmul(probs, valuesQ);                                    // [Q, S, D]
    out = out.transpose(0, 1).reshape({S, Q * D});                                        // [S, Q*D]
    observe(observer, l, "attn_output", out);
    torch::Tensor projected = project(out, lw.wo, lw.bo);                                 // [S, H]
    observe(observer, l, "o_proj", projected);
    return projected;
}

// The same block on the batch-invariant kernels: the projections, norms and RoPE row by row, then
// one fused attention per (query, head) over the cache (core/kernels/invariant.h gives the order),
// so the op-level observer sees no separate scores or softmax. All S rows of x give their K and V;
// the last `queries` of them (S, or 1: Span::lastLayerOnLastRow) their queries and outputs.
torch::Tensor Transformer::invariantAttention(int64_t l, const torch::Tensor& x, const Span& span, int64_t queries,
                                              ForwardObserver* observer) const {
    const LayerWeights& lw = weights_.layers[l];
    const int64_t S = x.size(0), Q = config_.numHeads, KV = config_.numKvHeads, D = config_.headDim;
    const int64_t first = S - queries;  // the first row that queries
    const kernels::Isa isa = kernels::bestIsa();
    const torch::ScalarType type = x.scalar_type();
    std::vector<torch::Tensor> qkv;  // [queries, Q*D], [S, KV*D], [S, KV*D]
    if (queries == S) {              // one call: the rows packed once for the three
        qkv = kernels::linears(x, {{lw.wq, lw.bq}, {lw.wk, lw.bk}, {lw.wv, lw.bv}}, type, isa, linearOrder());
    } else {
        qkv = kernels::linears(x.narrow(0, first, queries), {{lw.wq, lw.bq}}, type, isa, linearOrder());
        for (torch::Tensor& kv : kernels::linears(x, {{lw.wk, lw.bk}, {lw.wv, lw.bv}}, type, isa, linearOrder()))
            qkv.push_back(std::move(kv));
    }
    torch::Tensor q = qkv[0].view({queries, Q, D});                                       // [queries, Q, D]
    torch::Tensor k = qkv[1].view({S, KV, D});                                            // [S, KV, D]
    torch::Tensor v = qkv[2].view({S, KV, D});                                            // [S, KV, D]
    observe(observer, l, "q_proj", q);
    observe(observer, l, "k_proj", k);
    observe(observer, l, "v_proj", v);
    if (config_.qkNorm) {
        q = rmsNorm(q, lw.qNorm);
        k = rmsNorm(k, lw.kNorm);
        observe(observer, l, "q_norm", q);
        observe(observer, l, "k_norm", k);
    }
    const kernels::RopeAngles& angles = span.angles;  // [S, D/2] each; the queries' are its last rows
    q = kernels::rope(q, {angles.cosines.narrow(0, first, queries), angles.sines.narrow(0, first, queries)});
    k = kernels::rope(k, angles).transpose(0, 1);                                         // [KV, S, D]
    v = v.transpose(0, 1);                                                                // [KV, S, D]
    observe(observer, l, "rope_q", q.transpose(0, 1), 1);
    observe(observer, l, "rope_k", k, 1);
    span.cache->write(l, k, v);
    const int64_t T = span.start + S;
    torch::Tensor out = kernels::attention(q, span.cache->keys(l, T), span.cache->values(l, T),
                                           span.start + first);                           // [queries, Q*D]
    observe(observer, l, "attn_output", out);
    torch::Tensor projected = project(out, lw.wo, lw.bo);                                 // [queries, H]
    observe(observer, l, "o_proj", projected);
    return projected;
}

torch::Tensor Transformer::mlp(int64_t l, const torch::Tensor& x, ForwardObserver* observer) const {
    const LayerWeights& lw = weights_.layers[l];
    // SwiGLU: down(silu(gate(x)) * up(x))
    if (invariant()) {  // silu and the product per element in fp32, rounded once
        const auto gateUp =
            kernels::linears(x, {{lw.wGate, {}}, {lw.wUp, {}}}, x.scalar_type(), kernels::bestIsa(), linearOrder());
        const torch::Tensor& gate = gateUp[0];                                             // [S, I]
        const torch::Tensor& up = gateUp[1];                                               // [S, I]
        observe(observer, l, "mlp_up", up);
        torch::Tensor down = project(kernels::siluGate(gate, up), lw.wDown);               // [S, H]
        observe(observer, l, "mlp", down);
        return down;
    }
    torch::Tensor gate = torch::silu(project(x, lw.wGate));                               // [S, I]
    torch::Tensor up = project(x, lw.wUp);                                                // [S, I]
    observe(observer, l, "mlp_gate", gate);
    observe(observer, l, "mlp_up", up);
    torch::Tensor down = project(gate * up, lw.wDown);                                    // [S, H]
    observe(observer, l, "mlp", down);
    return down;
}

// ---- names ------------------------------------------------------------------------------------

std::string mixedPrecisionName(MixedPrecision mixed) {
    switch (mixed) {
    case MixedPrecision::None: return "none";
    case MixedPrecision::Fp32Head: return "fp32-head";
    case MixedPrecision::Bf16RoundedWeights: return "bf16-rounded-weights";
    }
    return "?";
}

std::string Precision::name() const {
    switch (mixed) {
    case MixedPrecision::None: return dtype;
    case MixedPrecision::Fp32Head: return dtype + "-lmhead-fp32";
    case MixedPrecision::Bf16RoundedWeights: return "layercast";
    }
    return "?";
}

const std::vector<std::string>& precisionNames() {
    static const std::vector<std::string> names = {"bf16", "fp32", "fp16", "bf16-lmhead-fp32", "layercast"};
    return names;
}

Precision parsePrecision(const std::string& name) {
    if (name == "bf16" || name == "fp32" || name == "fp16") return {name, MixedPrecision::None};
    if (name == "bf16-lmhead-fp32") return {"bf16", MixedPrecision::Fp32Head};
    if (name == "layercast") return {"fp32", MixedPrecision::Bf16RoundedWeights};
    std::string choices;
    for (std::size_t i = 0; i < precisionNames().size(); ++i)
        choices += (i == 0 ? "" : i + 1 == precisionNames().size() ? " or " : ", ") + precisionNames()[i];
    throw UsageError("unknown precision '" + name + "' (expected " + choices + ")");
}

std::string kernelsName(Kernels kernels) {
    switch (kernels) {
    case Kernels::Torch: return "torch";
    case Kernels::Invariant: return "invariant";
    case Kernels::InvariantTiles: return "invariant-tiles";
    }
    return "?";
}

Kernels parseKernels(const std::string& name) {
    for (const Kernels k : {Kernels::Torch, Kernels::Invariant, Kernels::InvariantTiles})
        if (name == kernelsName(k)) return k;
    throw UsageError("unknown kernels '" + name + "' (expected torch, invariant or invariant-tiles)");
}

torch::ScalarType parseDtype(const std::string& name) {
    if (name == "fp32" || name == "float32") return torch::kFloat32;
    if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
    if (name == "fp16" || name == "float16") return torch::kFloat16;
    throw UsageError("unknown dtype '" + name + "' (expected fp32, bf16 or fp16)");
}

std::string dtypeName(torch::ScalarType dtype) {
    switch (dtype) {
    case torch::kFloat32: return "fp32";
    case torch::kBFloat16: return "bf16";
    case torch::kFloat16: return "fp16";
    default: return c10::toString(dtype);
    }
}

torch::Device parseDevice(const std::string& name) {
    if (name == "cpu") return torch::kCPU;
    if (name.rfind("cuda", 0) == 0) {
        try {
            return torch::Device(name);
        } catch (const c10::Error&) {}
    }
    throw UsageError("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace kvscope
