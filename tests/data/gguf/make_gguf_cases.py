#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/data/gguf/types.gguf and types-expected.safetensors: one small tensor of every ggml type
kvscope dequantizes (2 x 512 values, shape [2, 512] in torch order) and, for each, the fp32 values
the `gguf` package's dequantize gives (what transformers loads). core's GGUF tests read both, so the
dequantization is checked bit for bit in every build, without Python. Regenerate with the torch-pip
.venv (pinned gguf):  .venv/bin/python tests/data/gguf/make_gguf_cases.py
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from gguf_blocks import TYPES, dequantized, ggml_tensor  # noqa: E402

here = Path(__file__).resolve().parent
rng = np.random.default_rng(20261207)
writer = GGUFWriter(str(here / "types.gguf"), "llama")
expected = {}
for name in TYPES:
    values = (rng.standard_normal((2, 512)) * 0.05).astype(np.float32)
    values[0, :4] = [0.0, -0.0, 1e-8, -3.5]  # zeros, a subnormal-sized value, a large one
    array, raw = ggml_tensor(name, values, rng)
    writer.add_tensor(name, array, raw_dtype=raw)
    expected[name] = dequantized(array, raw).reshape(2, 512)
writer.write_header_to_file()
writer.write_kv_data_to_file()
writer.write_tensors_to_file()
writer.close()
save_file(expected, str(here / "types-expected.safetensors"))
print(f"wrote {len(TYPES)} tensors to {here / 'types.gguf'}")
