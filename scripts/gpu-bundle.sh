#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Prepares, here, what scripts/gpu-check.sh needs on a GPU machine that has PyTorch with CUDA, cmake,
# ninja, nvcc and a C++ compiler, but no internet, no Qt and none of kvscope's other C++ dependencies:
# their Debian packages (headers, CMake and pkg-config files, shared libraries), downloaded with apt
# and unpacked into .gpu-bundle/sysroot, which git ignores. Carry .gpu-bundle to that machine with
# the source tree. Idempotent; needs apt's package lists (scripts/setup.sh updates them).
#   scripts/gpu-bundle.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/.gpu-bundle"
dev=(libsqlite3-dev libssl-dev libpcre2-dev libutf8proc-dev nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
     libfmt-dev pkgconf pkgconf-bin)
[ -f "$bundle/sysroot/.complete" ] && { echo "gpu-bundle: $bundle is ready"; exit 0; }

# The libraries those packages need, by whatever name this Debian release gives them (libfmt9 or
# libfmt10, libssl3 or libssl3t64, ...), except the C and C++ runtimes every machine has.
runtime=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
            "${dev[@]}" | awk '/Depends:/ {print $2}' | grep -v '^<' | sort -u \
          | grep -vE '^(libc6|libc6-dev|libstdc\+\+6|libgcc-s1|zlib1g|debconf|dpkg|libc-dev)' || true)
rm -rf "$bundle"
mkdir -p "$bundle/debs" "$bundle/sysroot"
# (As root into a folder apt's sandbox user cannot write: download unsandboxed, which is what it would do.)
(cd "$bundle/debs" && apt-get download -q -o APT::Sandbox::User=root "${dev[@]}" $runtime >/dev/null)
for deb in "$bundle"/debs/*.deb; do dpkg-deb -x "$deb" "$bundle/sysroot"; done
rm -rf "$bundle/debs" "$bundle/sysroot/usr/share/doc" "$bundle/sysroot/usr/share/man"
find "$bundle/sysroot" -name '*.a' -delete  # kvscope links the shared libraries
touch "$bundle/sysroot/.complete"
echo "gpu-bundle: $(ls "$bundle/sysroot/usr/lib/x86_64-linux-gnu" | wc -l) library files, $(du -sh "$bundle" | cut -f1) in $bundle"
