#!/usr/bin/env bash
# The main job on the embedded default, until the trained demo model and `kvscope demo` exist:
# first the study on one item by hand, then every protocol as a batch with its report.
# The one item, on a deterministic generated Qwen2-architecture model in bf16:
#   1. decode live: prompt + 48 greedy tokens, keeping the cache
#   2. rebuild the same integer ids as a one-shot prefill, and token by token after the prompt
#   3. compare the caches, find the op where they first differ, and continue from each
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvscope="$root/build/dev/app/kvscope"
work="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/demo"
model="$work/model-qwen2-tiny"
mkdir -p "$work"
"$kvscope" --version
[ -f "$model/config.json" ] || "$kvscope" make-test-model --arch qwen2 --hidden-size 128 --layers 4 \
  --heads 4 --kv-heads 2 --intermediate-size 256 --seed 1 --out "$model"

prompt=$("$kvscope" tokenize --model "$model" --text "The model thinks, then it answers.")
echo "== prompt ids: $prompt"
"$kvscope" cache build --model "$model" --dtype bf16 --prompt-ids "$prompt" --generate 48 \
  --construction live --out "$work/live.safetensors"
for c in prefill incremental; do
  "$kvscope" cache build --model "$model" --dtype bf16 --ids-from "$work/live.safetensors" \
    --construction "$c" --out "$work/$c.safetensors"
done
echo "== live vs token-by-token after the prompt (the study's bridge)"
"$kvscope" cache diff "$work/live.safetensors" "$work/incremental.safetensors" | head -2
echo "== live vs one-shot prefill of the same ids"
"$kvscope" cache diff "$work/live.safetensors" "$work/prefill.safetensors"
echo "== where the difference enters"
"$kvscope" cache locate --model "$model" --dtype bf16 "$work/live.safetensors" "$work/prefill.safetensors"
echo "== greedy continuations (token ids) from each cache"
for c in live prefill; do
  printf '%-8s ' "$c"
  "$kvscope" continue --model "$model" --dtype bf16 --cache "$work/$c.safetensors" --max-new-tokens 24 --json \
    | sed -E 's/.*"generated_ids":\[([^]]*)\].*/\1/'
done

echo "== the whole study as a batch: every protocol over 12 items (experiments/smoke.toml)"
ledger="$work/smoke.db"
rm -f "$ledger" "$ledger-wal" "$ledger-shm"
(cd "$root" && "$kvscope" run experiments/smoke.toml --ledger "$ledger")
"$kvscope" report "$ledger" --out "$work/report"
echo "== report files in $work/report (report.md, report.json, items.csv)"
