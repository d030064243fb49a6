// SPDX-License-Identifier: MIT
#pragma once
#include <string>

namespace kvscope {
std::string kvscopeVersion();       // "0.2.0"
std::string libtorchVersion();      // the headers kvscope was built against: "1.13.0", "2.13.0"
std::string libtorchLibraryPath();  // the libtorch_cpu file this process actually loaded
std::string cpuVectorFeatures();    // "avx2 fma avx512f ...": the extensions that pick kernels, and so bits
std::string cpuModelName();         // "AMD EPYC (family 25, model 17)": /proc/cpuinfo's model name and numbers
std::string deviceSummary();        // "cpu (2 threads); CUDA: not available"

// oneDNN runs libtorch's bf16 matrix products on x86 CPUs, and the instruction set it picked sets
// the pace of a torch-kernel bf16 prefill: AMX tiles on a CPU that has them; capped by the
// environment variable ONEDNN_MAX_CPU_ISA, what a CPU without them would run.
struct OneDnnIsa {
    std::string name;     // "avx512_core_amx", ...; empty where libtorch links oneDNN inside itself
    std::string library;  // the shared library that answered ("/lib/.../libdnnl.so.2"), or empty
    std::string cap;      // ONEDNN_MAX_CPU_ISA (or the older DNNL_MAX_CPU_ISA), empty if unset
};
OneDnnIsa torchOneDnnIsa();
// oneDNN's dnnl_cpu_isa_t value as its name. Values of both generations: AMX is 0x3e7 in oneDNN
// 2.x (Debian 12's libdnnl.so.2) and 0xfef in 3.x; values this does not know come back in hex.
std::string oneDnnIsaName(unsigned isa);

// OpenBLAS runs Debian's libtorch's fp32 matrix products, with the kernel set it picked for this CPU
// at load time. An OpenBLAS older than the CPU does not know it and falls back to SSE3 kernels:
// Debian 12's 0.3.21 picks "Prescott" on an Emerald Rapids, several times slower than what
// OPENBLAS_CORETYPE=SkylakeX picks (docs/history/kernel-measurements.md, "OpenBLAS core").
struct OpenBlasCore {
    std::string name;         // "SkylakeX", "Haswell", "Prescott", ...; empty where no OpenBLAS is loaded
    bool sseOnly = false;     // a kernel set of SSE alone (Prescott, Core2, Penryn, Dunnington, Nehalem, Atom)
    std::string faster;       // where sseOnly and this CPU has more: the OPENBLAS_CORETYPE that uses it
    std::string fasterIsa;    // the instruction set `faster` runs: "AVX-512" or "AVX2"
};
OpenBlasCore torchOpenBlasCore();
// The same from a core name and a CPU's features (AVX-512 F/BW/VL/DQ, AVX2 with FMA), for tests,
// and from a core name on this CPU.
OpenBlasCore openBlasCoreOf(const std::string& name, bool avx512, bool avx2);
OpenBlasCore openBlasCoreOnThisCpu(const std::string& name);
}  // namespace kvscope
