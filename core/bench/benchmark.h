// SPDX-License-Identifier: MIT
#pragma once
// `kvscope bench`: prefill and decode throughput on a Qwen2.5-0.5B-shaped model, next to the decode
// rate this machine's memory bandwidth allows, all measured in the same run.
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace kvscope {

struct BenchOptions {
    std::string modelDir;          // empty: a generated Qwen2.5-0.5B-shaped model in cacheDir
    std::string cacheDir;          // where the generated model is kept between runs
    int64_t promptTokens = 512;
    int64_t decodeTokens = 32;
    std::vector<torch::ScalarType> dtypes = {torch::kFloat32, torch::kBFloat16};
    torch::Device device = torch::kCPU;
};

struct BenchRow {
    std::string dtype;
    double prefillSeconds = 0, prefillTokensPerSecond = 0;
    double decodeTokensPerSecond = 0;  // transformers' kernels (the default numerics)
    double decodeMatrixVectorTokensPerSecond = 0;  // --decode-kernel mv, the same steps
    double weightBytesPerToken = 0;    // bytes of weights one decode step must read
    double boundTokensPerSecond = 0;   // bandwidth / weightBytesPerToken
};

struct BenchReport {
    std::string modelDir;
    std::string libtorch;                // version and the library file actually loaded
    std::string cpuFeatures;             // the vector extensions that decide kernels (and bits)
    double bandwidthBytesPerSecond = 0;  // triad, best of several passes
    int threads = 0;
    std::vector<BenchRow> rows;
};

// STREAM-style triad a[i] = b[i] + s*c[i] over arrays far larger than the caches; counts 3 arrays.
double measureTriadBandwidth(std::size_t bytesPerArray = 256u << 20, int passes = 5);

BenchReport runBenchmark(const BenchOptions& options, const std::function<void(const std::string&)>& log);

}  // namespace kvscope
