#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job on the embedded default, kvscope's trained demo model (resources/demo-model):
#   1. `kvscope demo`: every protocol of the study over the model's 200 held-out test problems into
#      a fresh ledger, then its report;
#   2. the study by hand on one item that run found divergent (the first in its items table; which
#      items split depends on the CPU): decode live up to the item's stage boundary keeping the
#      cache, rebuild the same integer ids as a one-shot prefill and token by token after the prompt,
#      compare the caches, find the op where they first differ, and continue greedily from each.
#   scripts/demo.sh smollm2: instead, the study on a real trained model - `kvscope demo --model
#      smollm2` (experiments/smollm2.toml; SmolLM2-135M-Instruct fetched into the user's cache) on
#      the torch-pip build, PyTorch 2.13's libtorch, which this builds first: the libtorch PyTorch 2.x
#      users have, and the one on which SmolLM2's live and prefill caches part (docs/SMOLLM2.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = smollm2 ]; then
  bash "$root/scripts/setup.sh" torch-pip
  exec "$root/build/torch-pip/app/kvscope" demo --model smollm2
fi
kvscope="$root/build/dev/app/kvscope"
model="$root/resources/demo-model"
work="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/walkthrough"
mkdir -p "$work"
"$kvscope" --version

echo "== the whole study as a batch: kvscope demo (every protocol, 200 test problems)"
ledger="$work/demo.db"
rm -f "$ledger"
"$kvscope" demo --ledger "$ledger"

# items.csv: item_id,status,boundary,suffix_equal,... ; the first item whose suffixes differ.
read -r item boundary < <("$kvscope" report "$ledger" --format csv |
  awk -F, 'NR > 1 && $4 == "false" { gsub(/"/, "", $1); print $1, $3; exit }') || true
if [[ -z "${item:-}" ]]; then
  echo "== no item diverged on this machine: nothing to walk through by hand (the report above says so)"
  exit 0
fi
prompt_text=$(sed -n "s/.*\"id\":\"$item\",\"prompt\":\"\\(Q: [^\\\\]*\\)\\\\n\".*/\\1/p" "$model/test.jsonl")
echo "== by hand: $item ($prompt_text), boundary after $boundary generated tokens"
prompt=$("$kvscope" tokenize --model "$model" --text "$prompt_text"$'\n')
echo "-- prompt ids: $prompt"
# One thread, as experiments/demo.toml runs: the bits (and so the split) depend on the thread count.
build=(--model "$model" --dtype bf16 --threads 1)
"$kvscope" cache build "${build[@]}" --prompt-ids "$prompt" --generate "$boundary" \
  --construction live --out "$work/live.safetensors"
for c in prefill incremental; do
  "$kvscope" cache build "${build[@]}" --ids-from "$work/live.safetensors" \
    --construction "$c" --out "$work/$c.safetensors"
done
echo "== live vs token-by-token after the prompt (the study's bridge)"
"$kvscope" cache diff "$work/live.safetensors" "$work/incremental.safetensors" | head -2
echo "== live vs one-shot prefill of the same ids"
"$kvscope" cache diff "$work/live.safetensors" "$work/prefill.safetensors"
echo "== where the difference enters"
"$kvscope" cache locate "${build[@]}" "$work/live.safetensors" "$work/prefill.safetensors"
echo "== greedy continuations from each cache (the same ids, other low bits)"
for c in live prefill; do
  echo "-- $c"
  "$kvscope" continue "${build[@]}" --cache "$work/$c.safetensors" --max-new-tokens 128
done
echo "== open the ledger in the desktop application: kvscope-gui $ledger --item $item"
