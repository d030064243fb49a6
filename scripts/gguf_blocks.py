# SPDX-License-Identifier: MIT
"""ggml tensors for kvscope's GGUF tests, written with the `gguf` package (scripts/requirements-torch.txt).

The types the package can quantize (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are quantized from the
given floats; it has no quantizer for the K-quants (Q4_K, Q5_K, Q6_K), so for those the blocks are made
directly: random quants and 6-bit (or int8) sub-block scales under fp16 super-block scales sized to the
floats' spread. Either way the file then holds valid blocks, and what a reader must reproduce is
gguf.dequantize of them (what transformers' GGUF loader computes).
"""
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

QUANTIZABLE = {"F32": T.F32, "F16": T.F16, "BF16": T.BF16, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "Q4_1": T.Q4_1,
               "Q5_0": T.Q5_0, "Q5_1": T.Q5_1}
K_QUANTS = {"Q4_K": (T.Q4_K, 144), "Q5_K": (T.Q5_K, 176), "Q6_K": (T.Q6_K, 210)}
TYPES = list(QUANTIZABLE) + list(K_QUANTS)


def _fp16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def _k_blocks(name, n_blocks, spread, rng):
    _, size = K_QUANTS[name]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scale = _fp16_bytes(rng.uniform(0.5, 1.0, n_blocks) * spread / 64)
    if name == "Q6_K":  # ql 128, qh 64, int8 scales 16, d: keep scales small so values stay near `spread`
        blocks[:, 192:208] = rng.integers(-32, 32, size=(n_blocks, 16)).astype(np.int8).view(np.uint8)
        blocks[:, 208:210] = scale
    else:  # d, dmin, 12 bytes of 6-bit scales and mins, (qh,) qs
        blocks[:, 0:2] = scale
        blocks[:, 2:4] = _fp16_bytes(rng.uniform(0.5, 1.0, n_blocks) * spread / 64)
    return blocks


def ggml_tensor(name, values, rng):
    """(array to hand GGUFWriter.add_tensor, raw_dtype): `values` (float32, rows x row length, rows a
    multiple of 256 for K-quants) as ggml type `name`."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if name == "F32":
        return values, None
    if name == "F16":
        return values.astype(np.float16), None
    if name in QUANTIZABLE:
        return quants.quantize(values, QUANTIZABLE[name]), QUANTIZABLE[name]
    qtype, size = K_QUANTS[name]
    rows, cols = values.shape
    assert cols % 256 == 0, f"{name} rows must be whole 256-element blocks"
    spread = float(np.abs(values).max()) or 1.0
    blocks = _k_blocks(name, rows * cols // 256, spread, rng)
    return blocks.reshape(rows, cols // 256 * size), qtype


def dequantized(array, raw_dtype):
    """What transformers' loader gets from a tensor written as `ggml_tensor` returned it."""
    if raw_dtype is None:
        return array.astype(np.float32)
    return quants.dequantize(array, raw_dtype).astype(np.float32)
