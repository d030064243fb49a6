// SPDX-License-Identifier: MIT
#include "core/util/threads.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace kvscope {

namespace {

// OpenBLAS (Debian's libtorch does fp32 GEMM through it) keeps its own pool, sized to all cores and
// deaf to at::set_num_threads: "--threads 1" still ran a second busy thread (measured: 160% CPU while
// training the demo model). Looked up at run time because only some builds load OpenBLAS at all (the
// pip wheel uses MKL, which at::set_num_threads does bound).
void boundOpenBlasThreads(int n) {
    using SetThreads = void (*)(int);
    if (auto* set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(n);
}

}  // namespace

void configureThreads(int threads) {
    const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(n);
    boundOpenBlasThreads(n);
}

void ensurePassiveOpenMpWait(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY")) return;
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);
    // exec failed (no /proc?): carry on with the active policy, only slower.
}

}  // namespace kvscope
