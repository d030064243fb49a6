#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The README's walk-through, measured: transformers' generate makes greedy bf16 trajectories on a
# model in batches of 1 and of 8 (left padding, sdpa attention: what users run), kvscope imports both
# files and replays them against prefill and live, torch and invariant kernels, and the report of each
# imported run goes into OUT (report.md, report.json, the trajectories).
#   bash scripts/trajectories-walkthrough.sh demo|smollm2 OUT [--limit N] [--max-new-tokens N] [--threads N]
# Needs the torch-pip build (kvscope on the libtorch transformers runs on) and its .venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model_name="$1" out="$2"
shift 2
limit=32 new_tokens=64 threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) limit="$2"; shift 2 ;;
    --max-new-tokens) new_tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    *) echo "trajectories-walkthrough: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$model_name" in
  demo) model="$root/resources/demo-model" prompts="$root/resources/demo-model/test.jsonl" chat=() ;;
  smollm2) model="$root/tests/data/smollm2-135m-instruct" prompts="$root/experiments/data/word-problems-200.jsonl"
           chat=(--chat) ;;
  *) echo "trajectories-walkthrough: model '$model_name': expected demo or smollm2" >&2; exit 2 ;;
esac
kvscope="$root/build/torch-pip/app/kvscope" python="$root/.venv/bin/python"
mkdir -p "$out"
ledger="$out/trajectories.db"
rm -f "$ledger"
for batch in 1 8; do
  start=$SECONDS
  "$python" "$root/scripts/hf-trajectories.py" "$model" "$prompts" "$out/batch$batch.jsonl" --batch-size "$batch" \
    --padding-side left --dtype bf16 --max-new-tokens "$new_tokens" --limit "$limit" --threads "$threads" \
    "${chat[@]}" 2>/dev/null
  echo "walkthrough: transformers generate, batch $batch: $((SECONDS - start)) s" >&2
  run=$("$kvscope" import "$out/batch$batch.jsonl" --ledger "$ledger" --model "$model" --name "transformers batch $batch")
  for reference in prefill live; do
    for kernels in torch invariant; do
      start=$SECONDS
      "$kvscope" replay "$ledger" --run "$run" --reference "$reference" --kernels "$kernels" --threads "$threads" \
        >/dev/null 2>&1
      echo "walkthrough: replay batch $batch $reference/$kernels: $((SECONDS - start)) s" >&2
    done
  done
  "$kvscope" report "$ledger" --run "$run" --out "$out/batch$batch" >/dev/null
done
echo "walkthrough: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $threads threads; reports in $out" >&2
