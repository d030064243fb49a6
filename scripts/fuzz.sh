#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer harnesses (tests/fuzz: clang, ASan + UBSan, the fuzz preset) and runs them.
#   scripts/fuzz.sh check [RUNS]             every harness over its committed seed corpus and
#                                            regression inputs, then RUNS (default 50000) mutations
#                                            from seed 1: a fixed amount of fuzzing whatever the
#                                            machine's speed (not bit-identical runs: coverage
#                                            feedback varies with the scratch path and thread timing)
#   scripts/fuzz.sh campaign RUNS [NAME...]  RUNS executions per harness (default: all harnesses),
#                                            one after another; corpus and logs in build/fuzz/campaign
# Any crash, sanitizer report, leak, timeout (10 s per input) or allocation over 2 GB fails the
# harness; libFuzzer writes the input to build/fuzz/crashes/NAME/. Commit it to
# tests/fuzz/regressions/NAME/ with the fix, so every later check replays it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode="${1:-check}"
harnesses=(safetensors config sharded_index tokenizer cache_file experiment_toml dataset_jsonl cli_parsers chat_template gguf
  trajectories_jsonl)

install_clang() {  # clang and the libFuzzer runtime of the same major version (Debian 12: 14, 13: 19)
  local missing=()
  command -v clang++ >/dev/null || missing+=(clang)
  if [ ${#missing[@]} -eq 0 ]; then
    local major
    major="$(clang++ -dumpversion | cut -d. -f1)"
    dpkg-query -W -f='${Status}' "libclang-rt-$major-dev" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("libclang-rt-$major-dev")
  fi
  [ ${#missing[@]} -eq 0 ] && return
  local SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  install_clang  # the runtime's name needs clang's version, known only once clang is there
}

build() {
  "$root/scripts/setup.sh" --packages-only
  install_clang
  cd "$root"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$(nproc)"
}

# libFuzzer's flags for every run: inputs up to 64 KB (the largest seed is ~20 KB), 10 s per input,
# 2 GB of memory (a single larger allocation is a finding: limits.h must stop it first).
fuzz_flags=(-max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

run_harness() {  # run_harness NAME WORKDIR EXTRA_FLAGS...: fuzz from WORKDIR's corpus, seeded from tests/fuzz
  local name="$1" work="$2"
  shift 2
  local corpus="$work/corpus" crashes="$root/build/fuzz/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  cp -n "$root/tests/fuzz/corpus/$name"/* "$corpus"/
  local inputs=("$corpus")
  [ -d "$root/tests/fuzz/regressions/$name" ] && inputs+=("$root/tests/fuzz/regressions/$name")
  "$root/build/fuzz/fuzz/fuzz_$name" "${fuzz_flags[@]}" -artifact_prefix="$crashes/" "$@" "${inputs[@]}"
}

check_harness() {  # check_harness NAME RUNS: every committed input exactly once (seeds and regressions), then RUNS mutations
  local name="$1" runs="$2" work start=$SECONDS
  work="$(mktemp -d)"
  run_harness "$name" "$work" -runs=0 > "$work/replay.log" 2>&1 || { cat "$work/replay.log"; return 1; }
  run_harness "$name" "$work" -seed=1 -runs="$runs" > "$work/fuzz.log" 2>&1 || { tail -60 "$work/fuzz.log"; return 1; }
  echo "fuzz.sh: $name: $(ls "$work/corpus" | wc -l) corpus inputs after" \
       "$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/fuzz.log" | grep -o '[0-9]*$') executions, $((SECONDS - start)) s, no finding"
  rm -rf "$work"
}

case "$mode" in
  check)
    runs="${2:-50000}"
    build
    # The harnesses (one thread each) run as many at a time as there are cores; a finding in one
    # fails the check once the others are done (they are short: 5-21 s each on a 2-core VM).
    pids=()
    for name in "${harnesses[@]}"; do
      while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.2; done
      check_harness "$name" "$runs" &
      pids+=($!)
    done
    failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=1; done  # each one's status, finished or not
    [ "$failed" -eq 0 ] || { echo "fuzz.sh: a harness failed (its log is above)" >&2; exit 1; }
    ;;
  campaign)
    runs="${2:?campaign needs a number of executions}"
    shift 2
    [ $# -gt 0 ] && harnesses=("$@")
    build
    for name in "${harnesses[@]}"; do
      work="$root/build/fuzz/campaign/$name"
      mkdir -p "$work"
      start=$SECONDS
      status=0
      run_harness "$name" "$work" -runs="$runs" > "$work/fuzz.log" 2>&1 || status=$?
      executed="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/fuzz.log" | grep -o '[0-9]*$' || echo '?')"
      echo "fuzz.sh: $name: $executed executions in $((SECONDS - start)) s, exit $status$([ $status -ne 0 ] && echo ' (FINDING: see '"$work"'/fuzz.log)')"
    done
    ;;
  *) echo "usage: scripts/fuzz.sh check [RUNS] | campaign RUNS [NAME...]" >&2; exit 2 ;;
esac
