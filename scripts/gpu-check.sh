#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The one GPU check: under 10 minutes on a single-GPU machine that has PyTorch 2.x with CUDA, cmake,
# ninja, nvcc and a C++ compiler, but no internet and no Qt. Run it from the source root with
# .gpu-bundle beside the sources (scripts/gpu-bundle.sh prepares it on a machine with Debian's
# packages). It
#   1. builds the headless CLI (no Qt, no tests) against that machine's torch;
#   2. runs the Hugging Face parity suite (logits, greedy ids, live and prefill caches, bit for bit)
#      on cuda in fp32, bf16 and fp16;
#   3. builds live and prefill caches of the demo model on cuda, diffs them and locates the first op;
#   4. runs experiments/smoke.toml with device cuda and prints its report;
#   5. prints one summary (also OUT/summary.txt). Every step runs even if an earlier one failed.
#   scripts/gpu-check.sh [OUT]        OUT: logs and summary (default: build/gpu-check)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "${1:-$root/build/gpu-check}" && cd "${1:-$root/build/gpu-check}" && pwd)"
python="${KVSCOPE_TORCH_PYTHON:-$(command -v python3)}"
sysroot="$root/.gpu-bundle/sysroot"
build="$root/build/gpu"
kvscope="$build/app/kvscope"
summary=()
started=$SECONDS

step() {  # step NAME LIMIT_SECONDS COMMAND...: runs it under a time limit, logs to OUT/NAME.log
  local name="$1" limit="$2" start=$SECONDS status
  shift 2
  echo "== $name"
  if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then status="ok"; else status="FAILED (exit $?)"; fi
  tail -n 25 "$out/$name.log"
  summary+=("$(printf '%-12s %-18s %4d s' "$name" "$status" $((SECONDS - start)))")
}

cuda_root() {  # the toolkit folder with include/cuda_runtime.h (nvcc on PATH may be a wrapper script)
  local nvcc candidate
  nvcc="$(command -v nvcc || true)"
  for candidate in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda "${nvcc:+$(dirname "$(dirname "$nvcc")")}"; do
    [ -n "$candidate" ] && [ -f "$candidate/include/cuda_runtime.h" ] && { echo "$candidate"; return; }
  done
  echo "gpu-check: no CUDA toolkit (include/cuda_runtime.h) under CUDA_HOME, /usr/local/cuda or nvcc's folder" >&2
  return 1
}

configure_and_build() {
  [ -f "$sysroot/.complete" ] || { echo "no $sysroot: run scripts/gpu-bundle.sh where Debian's packages are reachable"; return 1; }
  local cuda
  cuda="$(cuda_root)" || return 1
  # The bundle's pkgconf, with its own library found only by it (CMake would pick that binary anyway).
  mkdir -p "$out/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$sysroot/usr/lib/x86_64-linux-gnu" \
    "$sysroot/usr/bin/pkgconf" >"$out/bin/pkg-config"
  chmod +x "$out/bin/pkg-config"
  # A toolkit without NVRTC (seen: a partial one beside nvcc) can use the one PyTorch's CUDA wheels install.
  local extra=()
  if ! ls "$cuda"/lib64/libnvrtc.so* "$cuda"/lib/libnvrtc.so* >/dev/null 2>&1; then
    local site nvrtc
    site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
    nvrtc="$(find "$site/nvidia" -name 'libnvrtc.so*' 2>/dev/null | sort | head -1)"
    [ -n "$nvrtc" ] && extra+=(-DCUDA_nvrtc_LIBRARY="$nvrtc")
  fi
  export PKG_CONFIG_PATH="$sysroot/usr/lib/x86_64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$sysroot"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_BUILD_GUI=OFF -DKVSCOPE_BUILD_TESTS=OFF \
    -DKVSCOPE_TORCH_PYTHON="$python" -DCMAKE_PREFIX_PATH="$sysroot/usr" -DOPENSSL_ROOT_DIR="$sysroot/usr" \
    -DPKG_CONFIG_EXECUTABLE="$out/bin/pkg-config" -DCUDA_TOOLKIT_ROOT_DIR="$cuda" -DCUDAToolkit_ROOT="$cuda" \
    "${extra[@]}" &&
    cmake --build "$build" -j "$(nproc)" &&
    "$kvscope" --version
}

demo_caches() {
  local model="$root/resources/demo-model" work="$out/caches" prompt
  mkdir -p "$work"
  prompt=$("$kvscope" tokenize --model "$model" --text $'Q: 37+48-19*2\n') || return 1
  for dtype in bf16 fp16 fp32; do
    echo "-- $dtype"
    "$kvscope" cache build --model "$model" --device cuda --dtype "$dtype" --prompt-ids "$prompt" --generate 48 \
      --construction live --out "$work/live-$dtype.st" &&
      "$kvscope" cache build --model "$model" --device cuda --dtype "$dtype" --ids-from "$work/live-$dtype.st" \
        --construction prefill --out "$work/prefill-$dtype.st" &&
      "$kvscope" cache build --model "$model" --device cuda --dtype "$dtype" --ids-from "$work/live-$dtype.st" \
        --construction incremental --out "$work/incremental-$dtype.st" &&
      echo "live vs prefill:" && "$kvscope" cache diff "$work/live-$dtype.st" "$work/prefill-$dtype.st" | head -3 &&
      echo "live vs incremental:" && "$kvscope" cache diff "$work/live-$dtype.st" "$work/incremental-$dtype.st" | head -2 &&
      "$kvscope" cache locate --model "$model" --device cuda --dtype "$dtype" "$work/live-$dtype.st" "$work/prefill-$dtype.st" ||
      return 1
  done
}

smoke_on_cuda() {
  local experiment="$root/experiments/.smoke-cuda.toml"  # beside smoke.toml: its relative paths hold
  sed 's/^\[model\]$/[model]\ndevice = "cuda"/' "$root/experiments/smoke.toml" >"$experiment"
  "$kvscope" run "$experiment" --ledger "$out/smoke-cuda.db" --new-run && "$kvscope" report "$out/smoke-cuda.db"
  local status=$?
  rm -f "$experiment"
  return $status
}

echo "gpu-check: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: none'); $("$python" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1)"
step build 360 configure_and_build
step hf-parity 240 "$python" "$root/tests/parity/hf_parity.py" --kvscope "$kvscope" --work "$out/hf-parity" --device cuda \
  --dtypes fp32,bf16,fp16 --threads 4 --json-out "$out/hf-parity.json"
step caches 90 demo_caches
step smoke 150 smoke_on_cuda

{
  echo "== gpu-check summary ($((SECONDS - started)) s)"
  printf '%s\n' "${summary[@]}"
  grep -h "^hf parity:" "$out/hf-parity.log" 2>/dev/null
  grep -h -A1 "^live vs prefill:" "$out/caches.log" 2>/dev/null | grep -h "bit-exact" | sed 's/^/live vs prefill /'
} | tee "$out/summary.txt"
! grep -q FAILED "$out/summary.txt"
