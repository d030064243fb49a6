#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turns a llama.cpp GGUF file into a Hugging Face model folder with transformers' own GGUF loader.

  gguf-to-hf.py FILE.gguf OUT_DIR

Writes config.json, generation_config.json, model.safetensors (float32: the dequantized values
exactly as transformers computes them), tokenizer.json, tokenizer_config.json and chat_template.jinja,
as transformers' save_pretrained writes them. transformers marks a model it loaded from GGUF as
quantized and will not save it; its weights are plain float32 tensors by then, so the marker and
the quantization_config it added are dropped first. OUT_DIR appears whole or not at all (the files
go to OUT_DIR.partial, renamed when complete). Needs the pinned transformers, gguf and accelerate
(scripts/requirements-torch.txt).
"""
import argparse
import shutil
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if not args.gguf.is_file():
        raise RuntimeError(f"{args.gguf}: not a file")
    started = time.time()
    partial = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name)
    model = AutoModelForCausalLM.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(args.out, ignore_errors=True)
    partial.rename(args.out)
    print(f"gguf-to-hf: {args.gguf.name} -> {args.out} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError, ValueError) as error:
        print(f"gguf-to-hf: error: {error}", file=sys.stderr)
        sys.exit(1)
