#include "core/util/version.h"

#include <torch/torch.h>
#include <torch/version.h>

namespace kvscope {

std::string kvscopeVersion() { return KVSCOPE_VERSION; }

std::string libtorchVersion() { return TORCH_VERSION; }

std::string deviceSummary() {
    std::string s = "cpu (" + std::to_string(at::get_num_threads()) + " threads)";
    if (torch::cuda::is_available())
        s += "; CUDA: " + std::to_string(torch::cuda::device_count()) + " device(s)";
    else
        s += "; CUDA: not available";
    return s;
}

}  // namespace kvscope
