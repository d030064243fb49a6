#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvscope's replay against transformers, on trajectories transformers made (scripts/hf-trajectories.py).

For each model (a generated tiny qwen2 and SmolLM2-135M-Instruct through its chat template): greedy bf16
trajectories from transformers' generate (batch 1, eager attention: the op sequence kvscope's torch
kernels reproduce) with logprobs from generate's logits, and the same tokens' logprobs recomputed by
one teacher-forced forward (--recompute). kvscope imports both; `replay --reference live` of the first
and `replay --reference prefill` of the second, torch kernels, must find transformers' argmax (the
lowest id of its best logprob) at every step and give the token's logprob to within 1e-6: the logits are the same bits, and what is
left is the log-sum-exp (transformers' log_softmax in float64 there, kvscope's vectorised exp, within 2
ulp, summed in double). One thread on both sides.

  trajectory_parity.py --kvscope EXE --data tests/data --work DIR
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-6


def run(*args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"trajectory_parity: {' '.join(map(str, args[:3]))} ... failed:\n{result.stderr}")
    return result.stdout


def check(kvscope, work, name, model, prompts, chat):
    ledger = work / f"{name}.db"
    ledger.unlink(missing_ok=True)
    failures = []
    for recompute, reference in ((False, "live"), (True, "prefill")):
        out = work / f"{name}-{reference}.jsonl"
        run(sys.executable, ROOT / "scripts/hf-trajectories.py", model, prompts, out, "--batch-size", "1",
            "--dtype", "bf16", "--max-new-tokens", "24", "--threads", "1", "--attn-implementation", "eager",
            *(["--chat"] if chat else []), *(["--recompute"] if recompute else []))
        run_id = run(kvscope, "import", out, "--ledger", ledger, "--model", model, "--name", reference).strip()
        report = json.loads(run(kvscope, "replay", ledger, "--run", run_id, "--reference", reference,
                                "--kernels", "torch", "--threads", "1", "--json"))
        s = report["summary"]
        # transformers' own argmax at each step, from its top logprobs: the lowest id of the best value
        # (bf16 logits tie often; torch.argmax, which greedy decoding uses, and kvscope take the lowest
        # id, topk's order among ties is its own). For the recomputed logprobs it is where
        # transformers' own prefill would have chosen, which is not always the generated token.
        theirs = [min(i for i, v in step if v == step[0][1])
                  for line in map(json.loads, out.read_text().splitlines()) for step in line["top_logprobs"]]
        ours = [token["argmax"] for t in report["trajectories"] for token in t["tokens"]]
        differ = sum(a != b for a, b in zip(theirs, ours)) + abs(len(theirs) - len(ours))
        verdict = differ == 0 and s["max_abs_delta"] <= TOLERANCE
        print(f"{name:8} {reference:8} {s['trajectories']} trajectories, {s['tokens']} tokens: argmax differs "
              f"from transformers' on {differ}, max |delta| {s['max_abs_delta']:.2e} (engine token not the "
              f"argmax: {s['argmax_mismatch_tokens']}) -> {'ok' if verdict else 'FAIL'}")
        if not verdict:
            failures.append(f"{name} {reference}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvscope", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tiny = args.work / "tiny-qwen2"
    if not (tiny / "model.safetensors").exists():
        run(args.kvscope, "make-test-model", "--arch", "qwen2", "--out", tiny, "--seed", "5", "--hidden-size", "256")
    ids = args.work / "prompt-ids.jsonl"
    ids.write_text("".join(json.dumps({"id": f"p{k}", "prompt_ids": list(range(3 + k, 3 + 7 * k + 5))}) + "\n"
                           for k in range(4)))
    failures = check(args.kvscope, args.work, "tiny", tiny, ids, chat=False)
    smollm2 = args.data / "smollm2-135m-instruct"
    if not (smollm2 / "model.safetensors").exists():
        sys.exit(f"trajectory_parity: {smollm2} is missing: run scripts/fetch-test-data.sh --smollm2 PYTHON")
    texts = args.work / "prompts.jsonl"
    lines = (ROOT / "experiments/data/word-problems-200.jsonl").read_text().splitlines()[:4]
    texts.write_text("\n".join(lines) + "\n")
    failures += check(args.kvscope, args.work, "smollm2", smollm2, texts, chat=True)
    if failures:
        sys.exit("trajectory_parity: FAILED: " + ", ".join(failures))
    print("trajectory_parity: all cases agree")


if __name__ == "__main__":
    main()
