#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Greedy trajectories from transformers' generate, in the format `kvscope import` reads (docs/TRAJECTORIES.md).

  hf-trajectories.py MODEL_DIR PROMPTS.jsonl OUT.jsonl [--batch-size 8] [--padding-side left]
                     [--dtype bf16|fp32|fp16] [--max-new-tokens 64] [--top 5] [--threads 2] [--chat]
                     [--limit N] [--attn-implementation sdpa|eager] [--recompute]

PROMPTS.jsonl: one object a line with "id" and either "prompt_ids" (token ids, used as they are) or
"prompt" (text, tokenized with the model's tokenizer and no special tokens added; with --chat, as one
user message through the model's chat template, generation prompt added); "answer" is copied through.
--limit N takes the first N prompts. --attn-implementation: sdpa (transformers' default) or eager (the
op sequence kvscope's torch kernels reproduce bit for bit). Prompts are generated in batches of --batch-size, padded on --padding-side with the attention
mask and positions transformers builds, and each trajectory records its batch size: the batch is
part of what decides its bits. Every output token's logprob is log_softmax of generate's raw logits
(output_logits, fp32) taken in float64: the engine distribution's own log-probabilities (an fp32
log_softmax over a 49k-token vocabulary adds ~1e-5 of its own rounding); top_logprobs the --top best
of the same row. With --recompute the logprobs come instead from one teacher-forced forward over
prompt + output per trajectory (batch 1, no padding): the trainer's view of the same tokens. Output
stops at the first EOS (kept) or after --max-new-tokens; pad tokens after it are dropped. (Right
padding is what transformers warns against for decoder-only models: the new tokens follow the pads,
and a replay of the unpadded prompt measures what that did.)
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def read_prompts(path, tokenizer, chat):
    prompts = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if not line.strip():
            continue
        item = json.loads(line)
        if "prompt_ids" in item:
            ids = item["prompt_ids"]
        elif "prompt" in item and chat:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": item["prompt"]}], tokenize=True,
                                                add_generation_prompt=True, return_dict=True)["input_ids"]
        elif "prompt" in item:
            ids = tokenizer(item["prompt"], add_special_tokens=False)["input_ids"]
        else:
            sys.exit(f"{path}:{number}: expected 'prompt_ids' or 'prompt'")
        prompts.append({"id": str(item["id"]), "ids": ids, "answer": item.get("answer")})
    return prompts


def batch_inputs(batch, pad_id, side):
    width = max(len(p["ids"]) for p in batch)
    rows, masks = [], []
    for p in batch:
        pad = [pad_id] * (width - len(p["ids"]))
        ones, zeros = [1] * len(p["ids"]), [0] * len(pad)
        rows.append(pad + p["ids"] if side == "left" else p["ids"] + pad)
        masks.append(zeros + ones if side == "left" else ones + zeros)
    return torch.tensor(rows), torch.tensor(masks)


def trajectories_of(batch, out, width, eos_ids, args):
    lines = []
    for b, prompt in enumerate(batch):
        output, logprobs, tops = [], [], []
        for step, logits in enumerate(out.logits):
            token = int(out.sequences[b, width + step])
            row = torch.log_softmax(logits[b].double(), dim=-1)
            output.append(token)
            logprobs.append(float(row[token]))
            best = torch.topk(row, args.top)
            tops.append([[int(i), float(v)] for v, i in zip(best.values, best.indices)])
            if token in eos_ids:
                break
        lines.append({"id": prompt["id"], "prompt_ids": prompt["ids"], "output_ids": output, "logprobs": logprobs,
                      "top_logprobs": tops, "engine": f"transformers {transformers.__version__} generate",
                      "dtype": args.dtype, "batch_size": len(batch), "temperature": 0.0, "answer": prompt["answer"]})
    return lines


def recompute(model, line, top):
    """The line's logprobs and top_logprobs from one forward over prompt + output[:-1] (teacher forcing)."""
    ids = torch.tensor([line["prompt_ids"] + line["output_ids"][:-1]])
    logits = model(input_ids=ids).logits[0, len(line["prompt_ids"]) - 1:].double()
    rows = torch.log_softmax(logits, dim=-1)
    line["logprobs"] = [float(rows[i, token]) for i, token in enumerate(line["output_ids"])]
    best = torch.topk(rows, top)
    line["top_logprobs"] = [[[int(i), float(v)] for v, i in zip(best.values[k], best.indices[k])]
                            for k in range(len(line["output_ids"]))]
    line["engine"] += " + teacher-forced forward"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("prompts")
    parser.add_argument("out")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--padding-side", choices=["left", "right"], default="left")
    parser.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chat", action="store_true")
    parser.add_argument("--attn-implementation", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--recompute", action="store_true")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype],
                                                 attn_implementation=args.attn_implementation).eval()
    config = model.generation_config
    eos = config.eos_token_id if config.eos_token_id is not None else []
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(eos_ids) if eos_ids else 0)
    prompts = read_prompts(args.prompts, tokenizer, args.chat)[:args.limit]
    lines = []
    with torch.no_grad():
        for start in range(0, len(prompts), args.batch_size):
            batch = prompts[start:start + args.batch_size]
            ids, mask = batch_inputs(batch, pad_id, args.padding_side)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=args.max_new_tokens,
                                 output_logits=True, return_dict_in_generate=True, pad_token_id=pad_id)
            lines += trajectories_of(batch, out, ids.shape[1], eos_ids, args)
        if args.recompute:
            for line in lines:
                recompute(model, line, args.top)
    with open(args.out + ".partial", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    os.replace(args.out + ".partial", args.out)
    print(f"hf-trajectories: {len(lines)} trajectories in batches of {args.batch_size} ({args.padding_side} padding, "
          f"{args.dtype}) -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
