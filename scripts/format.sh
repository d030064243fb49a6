#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-format over every tracked C++ file, with the version pinned in scripts/requirements-torch.txt
# (installed into .venv by scripts/setup.sh torch-pip), so Debian 12 and 13 format alike.
#   scripts/format.sh check     fails and lists the files whose layout differs from .clang-format
#   scripts/format.sh apply     rewrites them
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
clang_format="$root/.venv/bin/clang-format"
[ -x "$clang_format" ] || { echo "format.sh: $clang_format is missing (run scripts/setup.sh torch-pip)" >&2; exit 1; }
cd "$root"
mapfile -t files < <(git ls-files '*.cpp' '*.h')
case "${1:-check}" in
  check)
    if ! "$clang_format" --dry-run -Werror "${files[@]}" 2> /tmp/kvscope-format.$$; then
      grep -o '^[^:]*\.\(cpp\|h\)' /tmp/kvscope-format.$$ | sort -u | sed 's/^/format.sh: not formatted: /' >&2
      rm -f /tmp/kvscope-format.$$
      echo "format.sh: run scripts/format.sh apply" >&2
      exit 1
    fi
    rm -f /tmp/kvscope-format.$$
    echo "format.sh: ${#files[@]} files formatted as .clang-format says ($("$clang_format" --version))"
    ;;
  apply) "$clang_format" -i "${files[@]}" ;;
  *) echo "usage: scripts/format.sh check|apply" >&2; exit 2 ;;
esac
