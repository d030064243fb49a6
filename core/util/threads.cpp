#include "core/util/threads.h"

#include <ATen/Parallel.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace kvscope {

void configureThreads(int threads) {
    const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(n);
}

void ensurePassiveOpenMpWait(char** argv) {
    if (std::getenv("OMP_WAIT_POLICY")) return;
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);
    // exec failed (no /proc?): carry on with the active policy, only slower.
}

}  // namespace kvscope
