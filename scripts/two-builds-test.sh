#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One ledger, two builds. Debian's libtorch (the dev preset) and PyTorch's (torch-pip) compute other
# bits, so a run one of them made must not be resumed, merged or audited by the other as if it were
# its own: a run's identity includes the environment that decides its bits (experiments/manifest.h).
#   scripts/two-builds-test.sh KVSCOPE_A KVSCOPE_B     e.g. build/dev/app/kvscope build/torch-pip/app/kvscope
# Checks: B refuses to resume A's run, naming both libtorch versions; a merge of A's and B's shards
# is refused naming both and, with --allow-mixed-environments, gives one run whose report says it is
# mixed; B's audit of A's run says it replays on another environment.
set -euo pipefail
a="$(realpath "$1")" b="$(realpath "$2")"
fail() { echo "two-builds-test: FAILED: $*" >&2; exit 1; }
libtorch_of() { "$1" --version | sed -n 's/^libtorch \([^ ]*\).*/\1/p'; }
va="$(libtorch_of "$a")" vb="$(libtorch_of "$b")"
[ -n "$va" ] && [ -n "$vb" ] || fail "cannot read the libtorch versions from --version"
[ "$va" != "$vb" ] || fail "both builds use libtorch $va: this test needs two different ones"
echo "two-builds-test: A = $a (libtorch $va), B = $b (libtorch $vb)"

work="$(mktemp -d /tmp/kvscope-two-builds.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >exp.toml <<'EOF'
name = "two-builds"
[model]
dir = "model"
dtypes = ["bf16"]
threads = 1
[model.generate]
arch = "qwen2"
seed = 3
hidden_size = 32
layers = 2
heads = 2
kv_heads = 1
intermediate_size = 64
[dataset]
path = "items.jsonl"
[generation]
max_new_tokens = 8
ignore_eos = true
[boundary]
rule = "fraction"
fraction = 0.5
[protocols]
run = ["matched"]
EOF
printf '{"id": "one", "prompt": "1+2=", "answer": "3"}\n{"id": "two", "prompt": "2+5=", "answer": "7"}\n' >items.jsonl

expect_refusal() {  # expect_refusal 'TEXT'... -- COMMAND...: COMMAND fails and says every TEXT
  local wanted=()
  while [ "$1" != "--" ]; do wanted+=("$1"); shift; done
  shift
  local out
  if out="$("$@" 2>&1)"; then fail "accepted: $*"; fi
  for text in "${wanted[@]}"; do grep -qF -- "$text" <<<"$out" || fail "'$*' did not say '$text': $out"; done
}

"$a" run exp.toml --ledger one.db --limit 1 >/dev/null 2>&1 || fail "A's run"
expect_refusal "libtorch $va" "libtorch $vb" "--new-run" -- "$b" run exp.toml --ledger one.db
echo "two-builds-test: B refuses to resume A's run, naming both environments"

"$a" run exp.toml --ledger shard0.db --shard 0/2 >/dev/null 2>&1 || fail "A's shard"
"$b" run exp.toml --ledger shard1.db --shard 1/2 >/dev/null 2>&1 || fail "B's shard"
expect_refusal "libtorch $va" "libtorch $vb" "--allow-mixed-environments" -- \
  "$a" ledger merge merged.db shard0.db shard1.db
[ ! -e merged.db ] || fail "a refused merge left merged.db behind"
"$a" ledger merge merged.db shard0.db shard1.db --allow-mixed-environments | grep -qF ": 2 items" ||
  fail "the allowed merge does not hold both items in one run"
"$a" report merged.db | grep -qF "**Mixed environments**" || fail "the merged run's report does not say it is mixed"
echo "two-builds-test: a merge across builds is refused, and with --allow-mixed-environments reported as mixed"

set +e
audit="$("$b" audit one.db 2>&1)"
status=$?
set -e
[ "$status" -eq 0 ] || [ "$status" -eq 3 ] || fail "B's audit of A's run failed ($status): $audit"
grep -qF "this replay runs on libtorch $vb" <<<"$audit" || fail "B's audit does not name its environment: $audit"
grep -qF "not the run's" <<<"$audit" || fail "B's audit does not say the environment differs: $audit"
echo "two-builds-test: B's audit of A's run says it replays on another environment (exit $status)"
echo "two-builds-test: passed"
