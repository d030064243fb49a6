#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvscope's tokenizer against Hugging Face `tokenizers` (the Rust library transformers uses).

Two tokenizer.json files:
  qwen3       the real Qwen3 tokenizer (tests/data/qwen3-tokenizer, fetched by scripts/fetch-test-data.sh)
  llama3-bpe  a Llama-3-style tokenizer that `tokenizers` itself trains here (BPE trainer on a small
              text, Llama 3's Split regex + ByteLevel, ignore_merges, a BOS template), so Llama 3's
              pre-tokenizer is covered by the same canonical comparison
and one corpus: tests/data/tokenizer/corpus.json plus >= 2,000 generated strings (random text from
many scripts, code, whitespace runs, digits, special tokens inside text, emoji sequences, combining
marks). For every string: encode (with the post-processor's special tokens) must give the same ids,
and decoding those ids the same text. Decoding is also compared on random id sequences, which cut
multi-byte characters apart: both sides must turn the invalid UTF-8 into the same U+FFFD.

Invalid UTF-8 *input* cannot be compared: `tokenizers` only accepts valid Unicode strings (Python
str). kvscope encodes invalid input bytes as U+FFFD, what Rust's String::from_utf8_lossy gives.

Exit status 0 when everything matches, 1 otherwise (the first mismatches are printed).
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

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
    if kind < 0.94:
        return rng.choice(EMOJI_SEQUENCES)
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
              "<|im_start|>user\nhi<|im_end|>\n", "x<|endoftext|>y", " <|endoftext|> ", "<|im_start|", "|im_start|>"]
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


def kvscope_lines(kvscope, command, model_dir, values, work):
    """One kvscope process for all values: --jsonl in, one JSON object a line out."""
    infile = work / f"{command}-in.jsonl"
    infile.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values), encoding="utf-8")
    run = subprocess.run([kvscope, command, "--model", str(model_dir), "--jsonl", str(infile)], capture_output=True)
    if run.returncode != 0:
        raise RuntimeError(f"kvscope {command} exited {run.returncode}: {run.stderr.decode(errors='replace').strip()}")
    # split("\n"), not splitlines(): U+2028 and U+0085 may stand raw inside the JSON strings
    return [json.loads(line) for line in run.stdout.decode("utf-8").split("\n") if line]


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
    print(f"{name:11} encode {len(corpus) - len(encode_bad)}/{len(corpus)} identical, "
          f"decode {len(id_lists) - len(decode_bad)}/{len(id_lists)} identical "
          f"({len(random_lists)} of them random id sequences)")
    for f in failures:
        print("  " + f)
    return len(encode_bad) + len(decode_bad)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvscope", required=True)
    parser.add_argument("--data", required=True, help="tests/data (corpus.json, qwen3-tokenizer/)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--generated", type=int, default=2500, help="generated strings (>= 2000)")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    qwen = data / "qwen3-tokenizer" / "tokenizer.json"
    if not qwen.exists():
        raise RuntimeError(f"{qwen} is missing: run scripts/fetch-test-data.sh (the README's test command does)")

    fixed = json.loads((data / "tokenizer" / "corpus.json").read_text(encoding="utf-8"))  # a list of strings
    corpus = fixed + generated_corpus(args.generated, args.seed)
    print(f"corpus: {len(fixed)} fixed + {len(corpus) - len(fixed)} generated strings (seed {args.seed})")
    rng = random.Random(args.seed + 1)

    bad = compare("qwen3", Tokenizer.from_file(str(qwen)), args.kvscope, qwen.parent, corpus, work, rng)
    llama_dir = work / "llama3-bpe"
    llama = llama3_style_tokenizer(llama_dir / "tokenizer.json", generated_corpus(3000, args.seed + 2) + fixed)
    bad += compare("llama3-bpe", llama, args.kvscope, llama_dir, corpus, work, rng)
    print(f"tokenizer parity: {'all identical' if bad == 0 else f'{bad} mismatches'}")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as error:
        print(f"tokenizer_parity: error: {error}", file=sys.stderr)
        sys.exit(2)
