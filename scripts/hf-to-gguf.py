#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes a small Hugging Face checkpoint (llama, qwen2 or qwen3, byte-level BPE tokenizer) as a llama.cpp
GGUF file, for kvscope's parity tests: the metadata llama.cpp's converter writes for these families
(general.*, ARCH.*, tokenizer.ggml.* as gpt2 with the vocabulary, merges and token types, the chat
template when the checkpoint has one), its tensor names, and llama's query/key rows interleaved per
head as llama.cpp stores them.

  hf-to-gguf.py DIR OUT.gguf --type F16|Q8_0|Q4_K|...   (scripts/gguf_blocks.py: the types)

Matrices are stored in --type; norms (and biases) in F32, as llama.cpp's converter keeps 1-D tensors.
A type that needs whole blocks (256 values for K-quants, 32 otherwise) falls back to F16 for a matrix
whose rows are not, as llama.cpp does. Not a general converter: it knows what make-test-model writes.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gguf_blocks import TYPES, ggml_tensor  # noqa: E402

ARCHES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(name):
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")  # model.layers.N.<module...>.weight|bias
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"


def load_weights(directory):
    """Every tensor of the checkpoint's shards; bfloat16 ones (numpy has none) through torch, as float32
    (exact: every bfloat16 is a float32)."""
    weights = {}
    for shard in sorted(directory.glob("*.safetensors")):
        try:
            weights.update(load_file(str(shard)))
        except TypeError:
            from safetensors.torch import load_file as load_torch_file
            weights.update({name: t.float().numpy() for name, t in load_torch_file(str(shard)).items()})
    return weights


def interleave_rotary_halves(w, heads):
    """llama.cpp's permute: each head's rows (half 0, half 1) -> pairs (half 0 row i, half 1 row i)."""
    shape = w.shape
    return w.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", choices=TYPES, default="F16")
    args = parser.parse_args()
    config = json.loads((args.dir / "config.json").read_text())
    arch = ARCHES[config["architectures"][0]]
    tokenizer = json.loads((args.dir / "tokenizer.json").read_text())
    rng = np.random.default_rng(7)

    writer = GGUFWriter(str(args.out), arch)
    writer.add_name(args.dir.name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    theta = config.get("rope_theta", (config.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    writer.add_rope_freq_base(theta)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config["vocab_size"])

    model = tokenizer["model"]
    tokens = [None] * config["vocab_size"]
    for token, index in model["vocab"].items():
        tokens[index] = token
    specials = {t["id"]: t for t in tokenizer.get("added_tokens", [])}
    for index, t in specials.items():
        tokens[index] = t["content"]
    tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if arch != "llama" else "llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if i in specials and specials[i].get("special") else 1 for i in range(len(tokens))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    if config.get("eos_token_id") is not None:
        eos = config["eos_token_id"]
        writer.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(config["bos_token_id"])
    writer.add_add_bos_token(False)
    template = args.dir / "chat_template.jinja"
    if template.exists():
        writer.add_chat_template(template.read_text())

    weights = load_weights(args.dir)
    for name in sorted(weights):
        w = weights[name].astype(np.float32) if weights[name].dtype != np.float32 else weights[name]
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            heads = config["num_attention_heads"] if ".q_proj." in name else config["num_key_value_heads"]
            w = interleave_rotary_halves(w, heads)
        kind = args.type if w.ndim == 2 else "F32"
        block = 256 if kind.endswith("_K") else 32 if kind.startswith("Q") else 1
        if w.ndim == 2 and w.shape[1] % block:
            kind = "F16"
        array, raw = ggml_tensor(kind, w, rng)
        writer.add_tensor(gguf_name(name), array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
