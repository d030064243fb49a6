#!/usr/bin/env bash
# The main job on the embedded default. Until the trained demo model exists, that is: write a
# deterministic Qwen2-architecture test model, then greedily continue a prompt with it, in fp32 and
# in bf16, printing both continuations as JSON.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kvscope="$root/build/dev/app/kvscope"
model="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/demo-qwen2-tiny"
"$kvscope" --version
[ -f "$model/config.json" ] || "$kvscope" make-test-model --arch qwen2 --hidden-size 128 --layers 4 \
  --heads 4 --kv-heads 2 --intermediate-size 256 --seed 1 --out "$model"
for dtype in fp32 bf16; do
  echo "== greedy continuation in $dtype"
  "$kvscope" generate --model "$model" --prompt "The model thinks, then it" --max-new-tokens 16 \
    --dtype "$dtype" --json
done
