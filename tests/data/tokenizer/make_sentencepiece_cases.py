#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes sentencepiece_cases.json: small SentencePiece-style BPE tokenizer.json files (the shapes of
Llama 2, TinyLlama and Mistral v0.1) and, for a few texts, the ids and decoded text that Hugging Face
`tokenizers` gives. tokenizer_test.cpp checks kvscope against them; the parity suite
(tests/parity/tokenizer_parity.py) compares far more text on trained tokenizers of the same shapes.
Run with the pinned tokenizers (.venv): python tests/data/tokenizer/make_sentencepiece_cases.py
"""
import json
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

WORDS = ["▁hello", "▁world", "▁he", "llo", "▁w", "or", "ld", "▁", "h", "e", "l", "o", "w", "r", "d", "é"]
MERGES = [("▁", "h"), ("▁h", "e"), ("l", "l"), ("ll", "o"), ("▁he", "llo"), ("▁", "w"), ("o", "r"), ("l", "d"),
          ("▁w", "or"), ("▁wor", "ld")]


def vocabulary(byte_tokens):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_tokens:
        for b in range(256):
            vocab[f"<0x{b:02X}>"] = len(vocab)
    for token in ["▁", "h", "e", "l", "o", "w", "r", "d", "é", "▁h", "▁he", "ll", "llo", "▁hello", "▁w", "or", "ld",
                  "▁wor", "▁world"]:
        vocab.setdefault(token, len(vocab))
    return vocab


def added(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def llama2_style(byte_fallback=True, unk=True, fuse_unk=True):
    """normalizer Prepend + Replace, no pre-tokenizer, decoders Replace/ByteFallback/Fuse/Strip, BOS."""
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<unk>", 0), added("<s>", 1), added("</s>", 2)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>" if unk else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": fuse_unk,
                  "byte_fallback": byte_fallback, "ignore_merges": False,
                  "vocab": vocabulary(byte_fallback), "merges": [list(m) for m in MERGES]},
    }


def metaspace_style(scheme):
    """Mistral-style: a Metaspace pre-tokenizer and decoder in place of the normalizer and Replace/Strip."""
    j = llama2_style()
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return j


TEXTS = ["hello world", "hello  wörld\n", "<s>hello", "hello</s> world", "日本 🙂", "\x01\x7f", "", " ", "wé",
         "xyz hello"]


def cases(name, j):
    tok = Tokenizer.from_str(json.dumps(j))
    out = []
    for text in TEXTS:
        ids = tok.encode(text).ids
        out.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skipping_special": tok.decode(ids, skip_special_tokens=True)})
    return {"name": name, "tokenizer": j, "cases": out}


def main():
    sets = [cases("llama2-byte-fallback", llama2_style()),
            cases("llama2-unk-fused", llama2_style(byte_fallback=False)),
            cases("llama2-unk-unfused", llama2_style(byte_fallback=False, fuse_unk=False)),
            cases("llama2-drop", llama2_style(byte_fallback=False, unk=False)),
            cases("metaspace-first", metaspace_style("first")),
            cases("metaspace-always", metaspace_style("always"))]
    path = Path(__file__).with_name("sentencepiece_cases.json")
    path.write_text(json.dumps({"tokenizers": tokenizers.__version__, "sets": sets}, ensure_ascii=False, indent=1) + "\n",
                    encoding="utf-8")
    print(f"wrote {path} ({sum(len(s['cases']) for s in sets)} cases, tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
