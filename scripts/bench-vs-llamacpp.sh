#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kvscope against llama.cpp on this machine, in one run (not part of the test command).
#
# Builds kvscope (scripts/setup.sh PRESET) and llama.cpp's llama-bench (CPU, native, Release) from the
# PyPI sdist of llama-cpp-python, which vendors a recent llama.cpp; writes F32 and BF16 GGUFs of the
# random Qwen2.5-0.5B-shaped model `kvscope bench` generates (the same values: it is stored in bf16), or
# of SmolLM2-135M-Instruct;
# then runs interleaved rounds, each llama-bench (pp512, tg64) and `kvscope bench` (prompt 512, 32
# timed decode steps; fp32 and bf16; torch and invariant kernels; its read and STREAM-triad probes
# give the bandwidth bound), the order swapped every round so that drift weighs on both. Prints each
# round's ratios and their median and range, and writes everything as JSON for the docs table
# (scripts/bench_vs_llamacpp.py table).
#
#   bash scripts/bench-vs-llamacpp.sh [--model qwen-shape|smollm2] [--rounds N] [--threads N]
#                                      [--preset P] [--out FILE]
#     --model qwen-shape (the random Qwen2.5-0.5B-shaped model) or smollm2 (SmolLM2-135M-Instruct, a
#     real trained model: tests/data/smollm2-135m-instruct, fetched by scripts/fetch-test-data.sh),
#     --rounds 3, --threads 2, --preset torch-pip (PyTorch 2.13's libtorch for the torch kernels;
#     dev: Debian's), --out build/bench-vs-llamacpp/DATE-MODEL.json
# The sdist, llama.cpp's build (one per CPU flag set: it is built for this CPU) and the GGUFs are kept
# in $KVSCOPE_LLAMACPP_CACHE (default ~/.cache/kvscope/llama.cpp).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds=3 threads=2 preset=torch-pip out="" model_name=qwen-shape
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model_name="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --preset) preset="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "bench-vs-llamacpp: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "$model_name" in qwen-shape | smollm2) ;; *) echo "bench-vs-llamacpp: --model qwen-shape or smollm2" >&2; exit 2 ;; esac
[ -n "$out" ] || out="$root/build/bench-vs-llamacpp/$(date -u +%Y-%m-%d)-$model_name.json"
sdist_version=0.3.36  # llama-cpp-python; its CHANGELOG names the llama.cpp commit it vendors
cache="${KVSCOPE_LLAMACPP_CACHE:-$HOME/.cache/kvscope/llama.cpp}"
say() { echo "bench-vs-llamacpp: $*" >&2; }

bash "$root/scripts/setup.sh" "$preset"
# The GGUF writer (the gguf package) lives in the torch-pip preset's .venv.
[ -x "$root/.venv/bin/python" ] || bash "$root/scripts/setup.sh" torch-pip
python="$root/.venv/bin/python"
kvscope="$root/build/$preset/app/kvscope"

sdist="$cache/llama_cpp_python-$sdist_version"
if [ ! -d "$sdist/vendor/llama.cpp" ]; then
  say "downloading the llama-cpp-python $sdist_version sdist (vendors llama.cpp)"
  mkdir -p "$cache"
  "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$sdist_version" -d "$cache"
  tar -xzf "$cache/llama_cpp_python-$sdist_version.tar.gz" -C "$cache"
fi
llamacpp_commit=$(grep -m1 -o 'ggml-org/llama.cpp@[0-9a-f]*' "$sdist/CHANGELOG.md" | cut -d@ -f2 || true)
cpu_key=$(grep -m1 '^flags' /proc/cpuinfo | md5sum | cut -c1-12)
build="$cache/build-$cpu_key"  # GGML_NATIVE: built for this CPU's instruction sets only
llama_bench="$build/bin/llama-bench"
if [ ! -x "$llama_bench" ]; then
  say "building llama-bench (CPU, native, Release) in $build"
  cmake -S "$sdist/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF >"$cache/cmake.log"
  cmake --build "$build" --target llama-bench -j "$(nproc)" >"$cache/build.log"
fi

if [ "$model_name" = smollm2 ]; then
  model="$root/tests/data/smollm2-135m-instruct"
  [ -f "$model/model.safetensors" ] || bash "$root/scripts/fetch-test-data.sh" --smollm2 "$python"
  model_args=(--model "$model")
  gguf_stem="$cache/smollm2-135m-instruct"
else
  # kvscope generates its bench model on first use; one tiny untimed bench does it.
  model_args=(--cache-dir "$cache/kvscope-models")
  model="$cache/kvscope-models/bench-qwen2.5-0.5b-shape"
  gguf_stem="$cache/bench-qwen2.5-0.5b-shape"
  if [ ! -f "$model/model.safetensors" ]; then
    say "generating kvscope bench's model in $model"
    "$kvscope" bench "${model_args[@]}" --prompt-tokens 1 --decode-tokens 1 --rebuild-tokens 1 \
      --dtypes bf16 --kernels invariant --no-kernel-figures --threads "$threads" >/dev/null
  fi
fi
for type in F32 BF16; do
  gguf="$gguf_stem.$type.gguf"
  if [ ! -f "$gguf" ] || [ "$model/model.safetensors" -nt "$gguf" ]; then
    say "writing $gguf"
    "$python" "$root/scripts/hf-to-gguf.py" "$model" "$gguf.partial" --type "$type"
    mv "$gguf.partial" "$gguf"
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_llamacpp() {
  "$llama_bench" -m "$gguf_stem.F32.gguf" -m "$gguf_stem.BF16.gguf" \
    -p 512 -n 64 -t "$threads" -r 3 -o json >"$work/llamacpp-$1.json" 2>"$work/llamacpp-$1.log"
}
run_kvscope() {
  "$kvscope" bench "${model_args[@]}" --prompt-tokens 512 --decode-tokens 32 --threads "$threads" \
    --dtypes fp32 bf16 --kernels torch invariant --no-kernel-figures --json >"$work/kvscope-$1.json" \
    2>"$work/kvscope-$1.log"
}
for round in $(seq "$rounds"); do
  say "round $round of $rounds"
  if [ $((round % 2)) -eq 1 ]; then run_llamacpp "$round"; run_kvscope "$round"
  else run_kvscope "$round"; run_llamacpp "$round"; fi
done

mkdir -p "$(dirname "$out")"
"$python" "$root/scripts/bench_vs_llamacpp.py" collate "$work" --rounds "$rounds" --threads "$threads" \
  --model "$model_name" \
  --kvscope-version "$("$kvscope" --version | head -1) ($(git -C "$root" describe --always --dirty 2>/dev/null || echo "not a git checkout"))" --llamacpp-package "llama-cpp-python $sdist_version" \
  --llamacpp-commit "${llamacpp_commit:-unknown}" --out "$out.partial"
mv "$out.partial" "$out"
say "wrote $out"
