#!/usr/bin/env bash
# The main job on the embedded default, kvscope's trained demo model (resources/demo-model):
#   1. the study on one item by hand, in bf16: decode live (prompt + greedy tokens, keeping the
#      cache), rebuild the same integer ids as a one-shot prefill and token by token after the prompt,
#      compare the caches, find the op where they first differ, and continue from each;
#   2. `kvscope demo`: every protocol over the model's 200 held-out test problems into a fresh
#      ledger, then the report and the command that opens it in the desktop application.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvscope="$root/build/dev/app/kvscope"
model="$root/resources/demo-model"
work="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/walkthrough"
mkdir -p "$work"
"$kvscope" --version

prompt=$("$kvscope" tokenize --model "$model" --text $'Q: 37+48-19*2\n')
echo "== prompt ids: $prompt"
"$kvscope" cache build --model "$model" --dtype bf16 --prompt-ids "$prompt" --generate 24 \
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
echo "== greedy continuations from each cache"
for c in live prefill; do
  echo "-- $c"
  "$kvscope" continue --model "$model" --dtype bf16 --cache "$work/$c.safetensors" --max-new-tokens 40
done

echo "== the whole study as a batch: kvscope demo (every protocol, 200 test problems)"
"$kvscope" demo
