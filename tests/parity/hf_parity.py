#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvscope against Hugging Face transformers on the same torch, bit for bit.

Three kinds of checkpoint:
  make-test-model  written by `kvscope make-test-model` (qwen2 with q/k/v bias, llama with llama3
                   rope scaling, qwen3 with q/k norm; tied and untied; a sharded bf16 one)
  transformers     small random models of each family saved by transformers' own save_pretrained
                   (its 5.x config.json: rope_parameters, dtype), in shapes beyond make-test-model's:
                   head_dim 8 and 64, intermediate sizes that are no multiple of 16, odd layer counts,
                   q/k/v/o biases, llama3 rope scaling, tied and untied
  smollm2          SmolLM2-135M-Instruct, a real trained model (tests/data/smollm2-135m-instruct,
                   scripts/fetch-test-data.sh --smollm2), prompted through its own chat template
  gguf             GGUF files as transformers' GGUF loader reads them: SmolLM2's own Q4_1 file, and
                   make-test-model checkpoints of each family written by scripts/hf-to-gguf.py in F16,
                   Q8_0 and the K-quants (one prompt each, the first thread count only)
and for each of them, each dtype and each thread count (and, for the transformers-saved ones, 64 and
16 new tokens), compares

  logits   every position of one forward over the decoded ids (kvscope logits / model(ids).logits)
  greedy   ids of a greedy decode of N new tokens (kvscope's live cache / model.generate)
  live     the cache a greedy decode keeps (kvscope cache build live / generate's DynamicCache)
  prefill  the cache of one forward over the same ids
  pattern  live-vs-prefill difference: per layer the differing element count and max |diff| of K and
           V, and the first differing (layer, position): kvscope's `cache diff` / the same on HF's caches

and prints one table. Exit status 0 when every cell is bit-exact, 1 otherwise (a cell that differs
shows the max distance in units in the last place), 2 on a usage or set-up error. Both sides run
with the same thread count; transformers uses attn_implementation="eager". Prompts are random ids
(several lengths, since libtorch's fp32 kernels choose their blocking by shape) or, for SmolLM2, a
conversation rendered by its chat template.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file
from transformers.utils import logging as transformers_logging
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache, GenerationConfig, LlamaConfig,
                          LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SIZE = ["--hidden-size", "128", "--layers", "4", "--heads", "4", "--kv-heads", "2", "--intermediate-size", "256"]

# name -> make-test-model flags (beyond SIZE). Together: every architecture, tied and untied, llama3
# rope scaling, q/k norm, q/k/v bias, a sharded checkpoint stored in bf16.
CHECKPOINTS = {
    "qwen2-bias-untied": ["--arch", "qwen2", "--seed", "11"],
    "qwen2-bias-tied": ["--arch", "qwen2", "--tie-embeddings", "--seed", "12"],
    "llama-rope3-untied": ["--arch", "llama", "--llama3-rope-scaling", "--seed", "13"],
    "llama-rope3-tied": ["--arch", "llama", "--llama3-rope-scaling", "--tie-embeddings", "--seed", "14"],
    "qwen3-qknorm-tied": ["--arch", "qwen3", "--tie-embeddings", "--seed", "15"],
    "qwen3-bf16-3shards": ["--arch", "qwen3", "--dtype", "bf16", "--shards", "3", "--seed", "16"],
}

# name -> (model class, config class, config fields, seed): saved by transformers itself.
SMALL = dict(vocab_size=512, max_position_embeddings=1024, rms_norm_eps=1e-5)
TRANSFORMERS_CHECKPOINTS = {
    "hf-llama-hd8-i172-l5-tied": (LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=64, num_attention_heads=8, num_key_value_heads=4, head_dim=8, intermediate_size=172,
        num_hidden_layers=5, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **SMALL), 21),
    "hf-qwen2-bias-i128-l2": (Qwen2ForCausalLM, Qwen2Config, dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, num_hidden_layers=2,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, **SMALL), 22),
    "hf-qwen3-hd64-i200-l3": (Qwen3ForCausalLM, Qwen3Config, dict(
        hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=200,
        num_hidden_layers=3, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        **SMALL), 23),
    "hf-llama3-rope-bias-l3": (LlamaForCausalLM, LlamaConfig, dict(
        hidden_size=72, num_attention_heads=6, num_key_value_heads=2, intermediate_size=190, num_hidden_layers=3,
        attention_bias=True, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, **SMALL), 24),
}
SMOLLM2 = "smollm2"
# GGUF files, read by transformers' GGUF loader (from_pretrained(dir, gguf_file=...)): SmolLM2's own
# Q4_1 file, and make-test-model checkpoints written by scripts/hf-to-gguf.py in one ggml type each
# (rows of 256 for the K-quants). name -> (make-test-model flags, type)
SMOLLM2_GGUF = "smollm2-gguf-q4_1"
GGUF_SIZE = ["--hidden-size", "256", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate-size", "512"]
GGUF_CHECKPOINTS = {
    "gguf-llama-f16": (["--arch", "llama", "--seed", "21"], "F16"),
    "gguf-qwen2-q8_0-tied": (["--arch", "qwen2", "--tie-embeddings", "--seed", "22"], "Q8_0"),
    "gguf-qwen3-q4_k": (["--arch", "qwen3", "--head-dim", "128", "--seed", "23"], "Q4_K"),  # transformers: Qwen3 heads of 128
    "gguf-llama-q5_k-tied": (["--arch", "llama", "--tie-embeddings", "--seed", "24"], "Q5_K"),
    "gguf-qwen2-q6_k": (["--arch", "qwen2", "--seed", "25"], "Q6_K"),
}
transformers_logging.disable_progress_bar()
SMOLLM2_MESSAGES = [{"role": "user", "content": "Write a short story about a robot who learns to paint. "
                                                "Use simple words, and end it with a moral."}]


class Kvscope:
    def __init__(self, exe, threads, device):
        self.exe, self.threads, self.device = exe, threads, device

    def __call__(self, *args, model_args=True):
        cmd = [self.exe, *args]
        if model_args:
            cmd += ["--threads", str(self.threads), "--device", self.device]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {run.returncode}: {run.stderr.strip()}")
        return run.stdout


def ordered_bits(t):
    """Float bits as integers ordered like the floats, so |a - b| counts units in the last place."""
    int_type = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[t.dtype]
    i = t.contiguous().view(int_type).to(torch.int64)
    magnitude = i & (0x7FFFFFFF if int_type == torch.int32 else 0x7FFF)
    return torch.where(i < 0, -magnitude, magnitude)


def compare(a, b):
    """'exact', or a short description of how a and b differ."""
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if torch.equal(ordered_bits(a), ordered_bits(b)):
        return "exact"
    ulps = (ordered_bits(a) - ordered_bits(b)).abs()
    differing = int((ulps > 0).sum())
    return f"{differing}/{a.numel()} differ, max {int(ulps.max())} ulp"


def compare_caches(kv, hf_layers, length):
    """First differing layer of a kvscope cache (its tensors, as loaded) against HF's cache layers."""
    for layer, (keys, values) in enumerate(hf_layers):
        for name, hf in (("keys", keys), ("values", values)):
            result = compare(kv[f"layers.{layer}.{name}"].cpu(), hf[0, :, :length].cpu())
            if result != "exact":
                return f"layer {layer} {name[0].upper()}: {result}"
    return "exact"


def cache_layers(cache):
    """[(keys [1, KV, T, D], values)] per layer, for transformers' old and new cache layouts."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def difference_pattern(live_layers, prefill_layers, length):
    """What `kvscope cache diff --json` reports, computed the same way (fp32 differences) on HF caches."""
    layers, first = [], None
    for index, (live, prefill) in enumerate(zip(live_layers, prefill_layers)):
        entry = {"layer": index}
        for tag, a, b in (("k", live[0][0, :, :length], prefill[0][0, :, :length]),
                          ("v", live[1][0, :, :length], prefill[1][0, :, :length])):
            bits_differ = ordered_bits(a) != ordered_bits(b)                     # [KV, T, D]
            entry[tag] = {"max_abs": float((a.float() - b.float()).abs().max()),
                          "differing": int(bits_differ.sum())}
            positions = bits_differ.any(-1).any(0).nonzero()
            if first is None and len(positions):
                first = {"layer": index, "position": int(positions[0])}
        layers.append(entry)
    return {"layers": layers, "first_difference": first}


def kvscope_pattern(diff_json):
    layers = [{"layer": l["layer"], **{t: {"max_abs": l[t]["max_abs"], "differing": l[t]["differing"]} for t in "kv"}}
              for l in diff_json["layers"]]
    return {"layers": layers, "first_difference": diff_json["first_difference"]}


def hf_greedy(model, prompt, new_tokens, device):
    """model.generate, greedy, exactly new_tokens + 1 tokens (no end-of-sequence stop)."""
    model.generation_config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=new_tokens + 1,
                                               min_new_tokens=0, eos_token_id=None, pad_token_id=0)
    ids = torch.tensor([prompt], device=device)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=DynamicCache(config=model.config),
                         return_dict_in_generate=True)
    sequence = out.sequences[0].tolist()
    if len(sequence) != len(prompt) + new_tokens + 1:
        raise RuntimeError(f"generate returned {len(sequence) - len(prompt)} tokens, expected {new_tokens + 1}")
    return sequence, cache_layers(out.past_key_values)


def save_transformers_checkpoint(name, model_dir):
    """A small random model of one family, saved by transformers: its config.json as 5.x writes it."""
    model_class, config_class, fields, seed = TRANSFORMERS_CHECKPOINTS[name]
    torch.manual_seed(seed)
    model = model_class(config_class(**fields)).eval()
    with torch.no_grad():  # transformers starts biases at 0 and norms at 1: give them values that count
        for parameter_name, parameter in model.named_parameters():
            if parameter_name.endswith(".bias"):
                parameter.normal_(0.0, 0.1)
            elif "norm" in parameter_name:
                parameter.uniform_(0.5, 1.5)
    model.save_pretrained(model_dir)


def is_gguf(model_path):
    return model_path.suffix == ".gguf"


def load_hf_model(model_path, dtype):
    if is_gguf(model_path):
        return AutoModelForCausalLM.from_pretrained(model_path.parent, gguf_file=model_path.name, dtype=dtype,
                                                    attn_implementation="eager")
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype, attn_implementation="eager")


def prepare_checkpoint(kvscope, name, work, data):
    """The model folder (or GGUF file) of a named checkpoint, made when missing."""
    if name == SMOLLM2_GGUF:
        path = data / "smollm2-135m-instruct.Q4_1.gguf"
        if not path.exists():
            raise RuntimeError(f"{path} is missing: run scripts/fetch-test-data.sh --smollm2 PYTHON")
        return path
    if name in GGUF_CHECKPOINTS:
        flags, ggml_type = GGUF_CHECKPOINTS[name]
        path = work / f"{name}.gguf"
        if not path.exists():
            source = work / f"{name}-source"
            kvscope("make-test-model", "--out", str(source), *GGUF_SIZE, *flags, model_args=False)
            subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "hf-to-gguf.py"),
                            str(source), str(path), "--type", ggml_type], check=True)
        return path
    if name == SMOLLM2:
        model_dir = data / "smollm2-135m-instruct"
        if not (model_dir / "model.safetensors").exists():
            raise RuntimeError(f"{model_dir} is missing: run scripts/fetch-test-data.sh --smollm2 PYTHON "
                               "(the README's test command does)")
        return model_dir
    model_dir = work / name
    if (model_dir / "config.json").exists():
        return model_dir
    if name in CHECKPOINTS:
        kvscope("make-test-model", "--out", str(model_dir), *SIZE, *CHECKPOINTS[name], model_args=False)
    elif name in TRANSFORMERS_CHECKPOINTS:
        save_transformers_checkpoint(name, model_dir)
    else:
        raise RuntimeError(f"unknown checkpoint '{name}' (known: {', '.join(all_checkpoints())})")
    return model_dir


def all_checkpoints():
    return [*CHECKPOINTS, *TRANSFORMERS_CHECKPOINTS, SMOLLM2, *GGUF_CHECKPOINTS, SMOLLM2_GGUF]


def prompt_for(name, model_dir, length):
    """SmolLM2: its chat template's rendering of a request; the others: random ids of `length`."""
    if name in (SMOLLM2, SMOLLM2_GGUF):
        tokenizer = (AutoTokenizer.from_pretrained(model_dir.parent, gguf_file=model_dir.name) if is_gguf(model_dir)
                     else AutoTokenizer.from_pretrained(model_dir))
        return tokenizer.apply_chat_template(SMOLLM2_MESSAGES, add_generation_prompt=True, tokenize=True,
                                             return_dict=False)
    if is_gguf(model_dir):
        vocab = AutoConfig.from_pretrained(model_dir.parent, gguf_file=model_dir.name).vocab_size
    else:
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    generator = torch.Generator().manual_seed(len(name) * 7919 + length)
    return torch.randint(0, vocab, (length,), generator=generator).tolist()


def run_case(kvscope, work, name, dtype_name, model_dir, prompt, args, n):
    case = work / f"{name}-{dtype_name}-p{len(prompt)}-n{n}-t{kvscope.threads}"
    case.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    dtype = DTYPES[dtype_name]
    common = ["--model", str(model_dir), "--dtype", dtype_name]

    # kvscope: live cache (prompt, then n greedy tokens fed back), prefill of the same ids, logits, diff.
    live, prefill, logits = case / "live.st", case / "prefill.st", case / "logits.st"
    kvscope("cache", "build", *common, "--construction", "live", "--prompt-ids", ",".join(map(str, prompt)),
            "--generate", str(n), "--out", str(live))
    kvscope("cache", "build", *common, "--construction", "prefill", "--ids-from", str(live), "--out", str(prefill))
    kvscope("logits", *common, "--ids-from", str(live), "--out", str(logits))
    kv_diff = json.loads(kvscope("cache", "diff", str(live), str(prefill), "--json", model_args=False))
    kv_live = load_file(live)
    with safe_open(live, "pt") as f:
        kv_ids = json.loads(f.metadata()["token_ids"]) + [int(kv_live["next_logits"].argmax())]

    # transformers on the same directory.
    model = load_hf_model(model_dir, dtype).to(device).eval()
    with torch.inference_mode():
        hf_ids, hf_live = hf_greedy(model, prompt, n, device)
        length = len(prompt) + n
        forward = model(input_ids=torch.tensor([hf_ids[:length]], device=device),
                        past_key_values=DynamicCache(config=model.config), use_cache=True)
        hf_logits = forward.logits[0].float().cpu()
        hf_prefill = cache_layers(forward.past_key_values)

    kv_logits = load_file(logits)["logits"]
    greedy = "exact" if kv_ids == hf_ids else next(
        f"first differs at new token {i - len(prompt)}" for i, (a, b) in enumerate(zip(kv_ids, hf_ids)) if a != b)
    pattern_hf = difference_pattern(hf_live, hf_prefill, length)
    pattern_kv = kvscope_pattern(kv_diff)
    differing_positions = sum(l["k"]["differing"] + l["v"]["differing"] for l in pattern_kv["layers"])
    return {
        "checkpoint": name, "dtype": dtype_name, "threads": kvscope.threads, "prompt_length": len(prompt),
        "new_tokens": n,
        "logits": compare(kv_logits, hf_logits),
        "greedy": greedy,
        "live": compare_caches(kv_live, hf_live, length),
        "prefill": compare_caches(load_file(prefill), hf_prefill, length),
        "pattern": "exact" if pattern_hf == pattern_kv else "differs",
        "live_vs_prefill": "bit-exact" if kv_diff["bit_exact"] else
            f"first L{kv_diff['first_difference']['layer']} P{kv_diff['first_difference']['position']}, "
            f"{differing_positions} elements",
        "pattern_detail": {"kvscope": pattern_kv, "transformers": pattern_hf},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvscope", required=True, help="the kvscope executable, built against this Python's torch")
    parser.add_argument("--work", required=True, help="folder for checkpoints and caches")
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / "data"),
                        help="tests/data (smollm2-135m-instruct/)")
    parser.add_argument("--threads", default="1,2", help="comma list of intra-op thread counts, both sides")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtypes", default=None, help="comma list (default: fp32,bf16 on cpu; fp32,bf16,fp16 on cuda)")
    parser.add_argument("--checkpoints", default=",".join(all_checkpoints()))
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--short-new-tokens", type=int, default=16,
                        help="also this many new tokens for the transformers-saved checkpoints (0: not), so "
                             "their one-shot prefills take more shapes (libtorch blocks fp32 products by shape)")
    parser.add_argument("--prompt-lengths", default="16,5",
                        help="comma list of random prompt lengths (SmolLM2 takes its chat prompt)")
    parser.add_argument("--json-out", help="write every result (with the difference patterns) here")
    args = parser.parse_args()
    dtypes = (args.dtypes or ("fp32,bf16,fp16" if args.device.startswith("cuda") else "fp32,bf16")).split(",")
    thread_counts = [int(t) for t in args.threads.split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    version = Kvscope(args.kvscope, 1, args.device)("--version", model_args=False).strip().replace("\n", "; ")
    print(f"kvscope: {version}")
    # The CPU's vector features are in kvscope's version line, printed above.
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, threads {args.threads}, "
          f"device {args.device}")
    started = time.time()
    results = []
    for name in args.checkpoints.split(","):
        model_dir = prepare_checkpoint(Kvscope(args.kvscope, 1, args.device), name, work, Path(args.data))
        prompts = [prompt_for(name, model_dir, int(n)) for n in args.prompt_lengths.split(",")]
        if name in (SMOLLM2, SMOLLM2_GGUF) or name in GGUF_CHECKPOINTS:
            prompts = prompts[:1]
        # GGUF cases add the dequantization to what the others check, not another kernel: the first
        # thread count only (the cold run's time).
        gguf = name == SMOLLM2_GGUF or name in GGUF_CHECKPOINTS
        for threads in thread_counts[:1] if gguf else thread_counts:
            torch.set_num_threads(threads)
            kvscope = Kvscope(args.kvscope, threads, args.device)
            lengths = [args.new_tokens]
            if name in TRANSFORMERS_CHECKPOINTS and args.short_new_tokens:
                lengths.append(args.short_new_tokens)
            for prompt in prompts:
                for n, dtype_name in [(n, d) for n in lengths for d in dtypes]:
                    results.append(run_case(kvscope, work, name, dtype_name, model_dir, prompt, args, n))
                    r = results[-1]
                    print(f"{name:24} {dtype_name:5} t{threads} p{len(prompt):<3} n{n:<3} logits: {r['logits']:12} "
                          f"greedy: {r['greedy']:8} live: {r['live']:8} prefill: {r['prefill']:8} "
                          f"pattern: {r['pattern']:6} (live vs prefill: {r['live_vs_prefill']})", flush=True)
    cells = [r[k] for r in results for k in ("logits", "greedy", "live", "prefill", "pattern")]
    exact = sum(c == "exact" for c in cells)
    print(f"hf parity: {exact}/{len(cells)} cells bit-exact over {len(results)} checkpoint x dtype x threads x "
          f"prompt x length cases ({time.time() - started:.0f} s)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"results": results, "kvscope": version,
                                                   "transformers": transformers.__version__,
                                                   "torch": torch.__version__, "threads": thread_counts}, indent=1))
    return 0 if exact == len(cells) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as error:
        print(f"hf_parity: error: {error}", file=sys.stderr)
        sys.exit(2)
