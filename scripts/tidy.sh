#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-tidy with the checks of .clang-tidy over every product source file (core, experiments, app,
# widgets; not tests or fuzz harnesses), on the compile commands of the `tidy` preset: clang,
# configured, and nothing built but libtorch's precompiled header, which clang-tidy then loads instead
# of parsing libtorch's headers for each file (which was most of a file's time). A header precompiled by another clang than clang-tidy's cannot be loaded, so where their
# versions differ the files parse the headers themselves. Fails on any finding.
#   scripts/tidy.sh [FILE...]     default: every tracked .cpp of those folders
# Debian's clang-tidy: 14 on Debian 12, 19 on Debian 13; the checks exist in both.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --packages-only
missing=()
for tool in clang++:clang clang-tidy:clang-tidy; do command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
major() { "$1" --version | grep -o 'version [0-9]*' | head -1; }
if [ "$(major clang++)" = "$(major clang-tidy)" ]; then
  cmake --preset tidy -DCMAKE_DISABLE_PRECOMPILE_HEADERS=OFF >/dev/null
  cmake --build build/tidy --target kvscope_torch_pch >/dev/null
else
  cmake --preset tidy -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON >/dev/null
fi
if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(git ls-files 'core/*.cpp' 'experiments/*.cpp' 'app/*.cpp' 'widgets/*.cpp'); fi
start=$SECONDS
# One file per clang-tidy process, as many at once as there are cores; xargs fails if any did.
if ! printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p build/tidy --quiet 2> build/tidy/stderr.log; then
  echo "tidy.sh: findings above (.clang-tidy lists the checks; fix the code, or say in the code why not)" >&2
  exit 1
fi
echo "tidy.sh: ${#files[@]} files clean under .clang-tidy ($(clang-tidy --version | grep -o 'version [0-9.]*'), $((SECONDS - start)) s)"
