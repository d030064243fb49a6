// SPDX-License-Identifier: MIT
#pragma once
#include <string>

namespace kvscope {
std::string kvscopeVersion();       // "0.2.0"
std::string libtorchVersion();      // the headers kvscope was built against: "1.13.0", "2.13.0"
std::string libtorchLibraryPath();  // the libtorch_cpu file this process actually loaded
std::string cpuVectorFeatures();    // "avx2 fma avx512f ...": the extensions that pick kernels, and so bits
std::string deviceSummary();        // "cpu (2 threads); CUDA: not available"
}  // namespace kvscope
