// SPDX-License-Identifier: MIT
#include "core/util/version.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
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

std::string cpuModelName() {
    std::ifstream in("/proc/cpuinfo");
    std::string name, family, model;
    auto valueOf = [](const std::string& line) {
        const auto colon = line.find(':');
        const auto start = line.find_first_not_of(' ', colon + 1);
        return colon == std::string::npos || start == std::string::npos ? std::string() : line.substr(start);
    };
    for (std::string line; std::getline(in, line) && !line.empty();) {  // the first processor's block
        if (line.rfind("model name", 0) == 0) name = valueOf(line);
        if (line.rfind("cpu family", 0) == 0) family = valueOf(line);
        if (line.rfind("model\t", 0) == 0) model = valueOf(line);
    }
    if (name.empty()) return "unknown CPU";
    return family.empty() ? name : name + " (family " + family + ", model " + model + ")";
}

std::string deviceSummary() {
    std::string s = "cpu (" + std::to_string(at::get_num_threads()) + " threads; " + cpuVectorFeatures() + ")";
    if (torch::cuda::is_available())
        s += "; CUDA: " + std::to_string(torch::cuda::device_count()) + " device(s)";
    else
        s += "; CUDA: not available";
    return s;
}

std::string oneDnnIsaName(unsigned isa) {
    switch (isa) {
    case 0x7: return "avx2";
    case 0x27: return "avx512_core";
    case 0x67: return "avx512_core_vnni";
    case 0xe7: return "avx512_core_bf16";
    case 0x3e7:  // oneDNN 2.x
    case 0xfef: return "avx512_core_amx";
    case 0x1fef: return "avx512_core_amx_fp16";
    default: {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%x", isa);
        return hex;
    }
    }
}

OneDnnIsa torchOneDnnIsa() {
    OneDnnIsa found;
    for (const char* variable : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})  // oneDNN reads the first one set
        if (const char* value = std::getenv(variable); value && *value && found.cap.empty()) found.cap = value;
    // Exported only where oneDNN is a shared library of its own (Debian's libtorch); a pip wheel links
    // it into libtorch_cpu with its symbols hidden. Looked up in the process, not linked: only some
    // builds have it.
    using EffectiveIsa = int (*)();
    auto* effective = reinterpret_cast<EffectiveIsa>(::dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa"));
    if (!effective) return found;
    found.name = oneDnnIsaName(static_cast<unsigned>(effective()));
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(effective), &info) && info.dli_fname) found.library = info.dli_fname;
    return found;
}

OpenBlasCore openBlasCoreOf(const std::string& name, bool avx512, bool avx2) {
    OpenBlasCore core{name, false, {}, {}};
    for (const char* sse : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom"})
        if (name == sse) core.sseOnly = true;
    if (core.sseOnly && avx512) {
        core.faster = "SkylakeX";
        core.fasterIsa = "AVX-512";
    } else if (core.sseOnly && avx2) {
        core.faster = "Haswell";
        core.fasterIsa = "AVX2";
    }
    return core;
}

OpenBlasCore torchOpenBlasCore() {
    // Looked up in the process, not linked: a pip wheel's libtorch brings MKL instead.
    using CoreName = char* (*)();
    auto* coreName = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* name = coreName ? coreName() : nullptr;
    return name ? openBlasCoreOnThisCpu(name) : OpenBlasCore{};
}

OpenBlasCore openBlasCoreOnThisCpu(const std::string& name) {
#if defined(__x86_64__) || defined(__i386__)
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    const bool avx512 = false, avx2 = false;
#endif
    return openBlasCoreOf(name, avx512, avx2);
}

}  // namespace kvscope
