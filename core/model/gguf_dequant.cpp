// SPDX-License-Identifier: MIT
// ggml's block formats back to fp32, operation for operation as the `gguf` Python package's
// quants.py computes them (numpy, fp32): a scale times a quant, then minus (or plus) an offset, each
// rounded on its own. Built with -ffp-contract=off (core/CMakeLists.txt): a fused multiply-add would
// round once and give other bits than transformers' loader.
//
// Block layouts (little-endian; d, dmin, m are fp16):
//   Q8_0  d, 32 x int8                                  x = q * d
//   Q4_0  d, 16 bytes: element j low nibble, 16+j high  x = d * (q - 8)
//   Q4_1  d, m, 16 bytes as Q4_0                        x = d * q + m
//   Q5_0  d, u32 high bits (bit j), 16 bytes as Q4_0    x = d * (q - 16)
//   Q5_1  d, m, u32 high bits, 16 bytes                 x = d * q + m
//   Q4_K  d, dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes: sub-block
//         2k low nibbles and 2k+1 high nibbles of bytes [32k, 32k+32)   x = (d*sc) * q - (dmin*m)
//   Q5_K  as Q4_K with 32 bytes of high bits (sub-block s: bit s of byte j) before the nibbles
//   Q6_K  128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, d: 16 sub-blocks of 16,
//         x = (d*scale) * (q - 32)
#include "core/model/gguf.h"

#include "core/util/error.h"

#include <cstring>

namespace kvscope {

namespace {

float halfToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    std::uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);  // inf, nan
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        exponent = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

float halfAt(const std::uint8_t* p) {
    std::uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return halfToFloat(h);
}

std::uint32_t u32At(const std::uint8_t* p) {
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Q4_0/Q4_1/Q5_0/Q5_1: the 4-bit part of element j of a 32-element block.
int nibble32(const std::uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

void q8_0(const std::uint8_t* b, float* out) {
    const float d = halfAt(b);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

void q4_0(const std::uint8_t* b, float* out) {
    const float d = halfAt(b);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(nibble32(b + 2, j) - 8);
}

void q4_1(const std::uint8_t* b, float* out) {
    const float d = halfAt(b), m = halfAt(b + 2);
    for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(nibble32(b + 4, j)) + m;
}

void q5_0(const std::uint8_t* b, float* out) {
    const float d = halfAt(b);
    const std::uint32_t high = u32At(b + 2);
    for (int j = 0; j < 32; ++j) {
        const int q = nibble32(b + 6, j) | static_cast<int>(((high >> j) & 1u) << 4);
        out[j] = d * static_cast<float>(q - 16);
    }
}

void q5_1(const std::uint8_t* b, float* out) {
    const float d = halfAt(b), m = halfAt(b + 2);
    const std::uint32_t high = u32At(b + 4);
    for (int j = 0; j < 32; ++j) {
        const int q = nibble32(b + 8, j) | static_cast<int>(((high >> j) & 1u) << 4);
        out[j] = d * static_cast<float>(q) + m;
    }
}

// The 6-bit scale and min of sub-block s of a Q4_K/Q5_K block's 12 scale bytes.
void kScaleMin(const std::uint8_t* s, int j, int& scale, int& min) {
    if (j < 4) {
        scale = s[j] & 0x3f;
        min = s[4 + j] & 0x3f;
    } else {
        scale = (s[4 + j] & 0x0f) | ((s[j - 4] >> 2) & 0x30);
        min = (s[4 + j] >> 4) | ((s[j] >> 2) & 0x30);
    }
}

// Q4_K (highBits null) and Q5_K.
void qk45(const std::uint8_t* b, const std::uint8_t* highBits, const std::uint8_t* qs, float* out) {
    const float d = halfAt(b), dmin = halfAt(b + 2);
    for (int s = 0; s < 8; ++s) {
        int scale = 0, min = 0;
        kScaleMin(b + 4, s, scale, min);
        const float ds = d * static_cast<float>(scale), ms = dmin * static_cast<float>(min);
        const std::uint8_t* bytes = qs + 32 * (s / 2);
        for (int j = 0; j < 32; ++j) {
            int q = s % 2 == 0 ? bytes[j] & 0x0f : bytes[j] >> 4;
            if (highBits) q |= ((highBits[j] >> s) & 1) << 4;
            out[32 * s + j] = ds * static_cast<float>(q) - ms;
        }
    }
}

void q4_k(const std::uint8_t* b, float* out) { qk45(b, nullptr, b + 16, out); }
void q5_k(const std::uint8_t* b, float* out) { qk45(b, b + 16, b + 48, out); }

void q6_k(const std::uint8_t* b, float* out) {
    const std::uint8_t* ql = b;
    const std::uint8_t* qh = b + 128;
    const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
    const float d = halfAt(b + 208);
    for (int i = 0; i < 256; ++i) {
        const int half = i / 128, within = i % 128;
        const int low = (ql[64 * half + within % 64] >> (4 * (within / 64))) & 0x0f;
        const int high = (qh[32 * half + within % 32] >> (2 * (within / 32))) & 0x03;
        const float ds = d * static_cast<float>(scales[i / 16]);
        out[i] = ds * static_cast<float>((low | (high << 4)) - 32);
    }
}

}  // namespace

void dequantizeToFloat(GgmlType type, const std::uint8_t* bytes, std::int64_t count, float* out) {
    const GgmlTypeTraits* traits = ggmlTypeTraits(static_cast<std::uint32_t>(type));
    if (!traits || count % traits->blockSize != 0)
        throw Error("dequantizeToFloat: " + std::to_string(count) + " values of " +
                    ggmlTypeName(static_cast<std::uint32_t>(type)));
    switch (type) {
    case GgmlType::F32: std::memcpy(out, bytes, static_cast<std::size_t>(count) * sizeof(float)); return;
    case GgmlType::F16:
        for (std::int64_t i = 0; i < count; ++i) out[i] = halfAt(bytes + 2 * i);
        return;
    case GgmlType::BF16:
        for (std::int64_t i = 0; i < count; ++i) {
            std::uint16_t h;
            std::memcpy(&h, bytes + 2 * i, sizeof h);
            const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
            std::memcpy(out + i, &bits, sizeof(float));
        }
        return;
    default: break;
    }
    void (*block)(const std::uint8_t*, float*) = nullptr;
    switch (type) {
    case GgmlType::Q8_0: block = q8_0; break;
    case GgmlType::Q4_0: block = q4_0; break;
    case GgmlType::Q4_1: block = q4_1; break;
    case GgmlType::Q5_0: block = q5_0; break;
    case GgmlType::Q5_1: block = q5_1; break;
    case GgmlType::Q4_K: block = q4_k; break;
    case GgmlType::Q5_K: block = q5_k; break;
    case GgmlType::Q6_K: block = q6_k; break;
    default: break;
    }
    const std::int64_t blocks = count / traits->blockSize;
    for (std::int64_t k = 0; k < blocks; ++k) block(bytes + k * traits->blockBytes, out + k * traits->blockSize);
}

}  // namespace kvscope
