#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# How tests/data/ledger/v1.sql was made (kept for the record; the test reads the committed dump and
# never runs this): two runs of a built kvscope into one fresh ledger, then sqlite3's text dump.
#   run 1: every protocol on 4 arithmetic items of a small generated qwen2 model, caches kept
#   run 2: a boundary no trace reaches, so every item is recorded as no_boundary
# Usage: tests/data/ledger/make_v1.sh build/dev/app/kvscope > tests/data/ledger/v1.sql
set -euo pipefail
kvscope="$(realpath "$1")"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed -e "s|^dir = .*|dir = \"$work/model\"|" -e "s|^path = .*|path = \"$root/experiments/data/arith12.jsonl\"|" \
    -e 's|^name = .*|name = "schema-v1"|' "$root/experiments/smoke.toml" > "$work/all.toml"
sed -e 's|^name = .*|name = "schema-v1-no-boundary"|' -e 's|^rule = .*|rule = "offset"\noffset = 1000|' \
    -e 's|^fraction = .*||' -e 's|^run = .*|run = ["matched"]|' "$work/all.toml" > "$work/none.toml"
"$kvscope" run "$work/all.toml" --ledger "$work/v1.db" --limit 4 --keep-caches "$work/caches" --threads 2 >&2
"$kvscope" run "$work/none.toml" --ledger "$work/v1.db" --limit 2 --new-run --threads 2 >&2
sqlite3 "$work/v1.db" .dump
