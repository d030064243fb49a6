// SPDX-License-Identifier: MIT
#include "core/util/version.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace kvscope {

std::string kvscopeVersion() { return KVSCOPE_VERSION; }

std::string libtorchVersion() { return TORCH_VERSION; }

std::string libtorchLibraryPath() {
    // Which file defines a libtorch function tells the distribution's build from a pip wheel's, which
    // the version macro alone cannot when both are installed.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &info) && info.dli_fname) return info.dli_fname;
    return "unknown";
}

std::string cpuVectorFeatures() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream words(line.substr(line.find(':') + 1));
        std::vector<std::string> flags;
        for (std::string w; words >> w;) flags.push_back(w);
        std::string found;
        for (const char* wanted :
             {"avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16"})
            for (const auto& f : flags)
                if (f == wanted) found += (found.empty() ? "" : " ") + f;
        return found.empty() ? "no AVX2/AVX-512/AMX" : found;
    }
    return "unknown (no /proc/cpuinfo flags)";
}

std::string deviceSummary() {
    std::string s = "cpu (" + std::to_string(at::get_num_threads()) + " threads; " + cpuVectorFeatures() + ")";
    if (torch::cuda::is_available())
        s += "; CUDA: " + std::to_string(torch::cuda::device_count()) + " device(s)";
    else
        s += "; CUDA: not available";
    return s;
}

}  // namespace kvscope
