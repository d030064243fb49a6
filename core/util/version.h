#pragma once
#include <string>

namespace kvscope {
std::string kvscopeVersion();   // "0.1.0"
std::string libtorchVersion();  // "1.13.0"
std::string deviceSummary();    // "cpu (2 threads); CUDA: not available"
}  // namespace kvscope
