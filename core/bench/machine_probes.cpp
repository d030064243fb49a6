// SPDX-License-Identifier: MIT
#include "core/bench/machine_probes.h"

#include "core/kernels/invariant_ops.h"
#include "core/util/huge_pages.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

namespace kvscope {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs body(t, begin, end) on `threads` plain threads t, one contiguous slice of [0, n) each
// (n/threads rounded to 256 floats: the read probe's step of 64 floats in up to 4 streams).
template <typename Body>
void onSlices(int64_t n, int threads, const Body& body) {
    std::vector<std::thread> pool;
    const int64_t slice = (n / threads) / 256 * 256;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { body(t, slice * t, t + 1 == threads ? n : slice * (t + 1)); });
    for (auto& th : pool) th.join();
}

// About `bytes` of floats, rounded down to a multiple of 256 (onSlices' step), on the pages the
// weights get (Transformer::load): on 4 KiB pages the same reads ran slower (util/huge_pages.h),
// which would put the bound under a decode step. Each element first touched,
// as `value`, by the thread of `threads` that will stream its slice.
class ProbeArray {
public:
    ProbeArray(std::size_t bytes, int threads, float value)
        : n_(static_cast<int64_t>(bytes / sizeof(float)) / 256 * 256),
          bytes_(static_cast<std::size_t>(n_) * sizeof(float)) {
        data_ = static_cast<float*>(allocateHugePageBlock(bytes_));
        if (!data_) throw std::bad_alloc();
        onSlices(n_, threads, [&](int, int64_t lo, int64_t hi) { std::fill(data_ + lo, data_ + hi, value); });
    }
    ~ProbeArray() { freeHugePageBlock(data_, bytes_); }
    ProbeArray(const ProbeArray&) = delete;
    ProbeArray& operator=(const ProbeArray&) = delete;
    float* data() const { return data_; }
    int64_t size() const { return n_; }

private:
    int64_t n_;
    std::size_t bytes_;
    float* data_ = nullptr;
};

// One read pass over x by `threads` threads, each its slice, as 1, 2 and 4 sequential streams side
// by side: the best of the three, bytes per second (one stream per core under-reads a machine whose
// prefetchers keep few misses in flight per stream; a decode step reads each path's kDecodeStreams
// runs of tiles per thread).
double readPass(const ProbeArray& x) {
    const int threads = std::max(1, at::get_num_threads());
    const kernels::KernelPath& path = kernels::kernelPath(kernels::bestIsa());
    std::vector<float> sinks(static_cast<std::size_t>(threads));
    double best = 0;
    for (const int64_t streams : {1, 2, 4}) {
        const auto t0 = Clock::now();
        onSlices(x.size(), threads, [&](int t, int64_t lo, int64_t hi) {
            sinks[static_cast<std::size_t>(t)] = path.readAll(x.data() + lo, hi - lo, streams);
        });
        best = std::max(best, static_cast<double>(x.size()) * sizeof(float) / secondsSince(t0));
    }
    volatile float sink = sinks[0];  // keep the sums observable
    (void)sink;
    return best;
}

}  // namespace

std::size_t streamArrayBytes(std::size_t lastLevelCache, std::size_t physicalMemory) {
    constexpr std::size_t kAtLeast = std::size_t{256} << 20;
    return std::max(kAtLeast, std::min(4 * lastLevelCache, physicalMemory / 8));
}

std::size_t lastLevelCacheBytes() {
    // index*/level and size ("491520K", "32M") for each cache of CPU 0; the highest level wins.
    namespace fs = std::filesystem;
    std::error_code error;
    int bestLevel = 0;
    std::size_t bestBytes = 0;
    for (const auto& entry : fs::directory_iterator("/sys/devices/system/cpu/cpu0/cache", error)) {
        std::ifstream levelFile(entry.path() / "level"), sizeFile(entry.path() / "size");
        int level = 0;
        std::size_t amount = 0;
        std::string unit;
        if (!(levelFile >> level) || !(sizeFile >> amount)) continue;
        sizeFile >> unit;
        const std::size_t bytes = amount << (unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : 0);
        if (level > bestLevel) bestLevel = level, bestBytes = bytes;
    }
    return bestBytes;
}

std::size_t physicalMemoryBytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
    return pages > 0 && pageSize > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(pageSize)
                                     : std::size_t{8} << 30;
}

// The triad's a = b + s c and the read passes' b. Each is 1/8 of the memory at most
// (streamArrayBytes), so the rows measured while they are kept have 5/8 of it.
struct BandwidthProbe::Arrays {
    ProbeArray a, b, c;
};

// Why the arrays are kept: on a VM whose guest reports free pages to the host, decode steps took
// several times as long for seconds after the process freed memory, and arrays mapped afresh for
// each pass slowed the steps between them (docs/history/kernel-measurements.md, "Probe arrays").
BandwidthProbe::BandwidthProbe(std::size_t bytesPerArray) {
    const int threads = std::max(1, at::get_num_threads());
    arrays_.reset(new Arrays{ProbeArray(bytesPerArray, threads, 0.f), ProbeArray(bytesPerArray, threads, 1.f),
                             ProbeArray(bytesPerArray, threads, 2.f)});
}

BandwidthProbe::~BandwidthProbe() = default;

double BandwidthProbe::readPass() const { return kvscope::readPass(arrays_->b); }

Bandwidth BandwidthProbe::measure(int passes) const {
    const int threads = std::max(1, at::get_num_threads());
    const kernels::KernelPath& path = kernels::kernelPath(kernels::bestIsa());
    const ProbeArray &a = arrays_->a, &b = arrays_->b, &c = arrays_->c;
    const int64_t n = a.size();
    Bandwidth best;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = Clock::now();
        onSlices(n, threads, [&](int, int64_t lo, int64_t hi) {
            path.triad(a.data() + lo, b.data() + lo, c.data() + lo, 3.0f, hi - lo);
        });
        best.triad = std::max(best.triad, 3.0 * static_cast<double>(n) * sizeof(float) / secondsSince(t0));
        const double read = kvscope::readPass(b);
        best.read = std::max(best.read, read);
        best.readPasses.push_back(read);
    }
    volatile float sink = a.data()[n / 2];  // keep the stores observable
    (void)sink;
    return best;
}

double measureMultiplyAdds(bool pairs, int passes) {
    const int threads = std::max(1, at::get_num_threads());
    const kernels::KernelPath& path = kernels::kernelPath(kernels::bestIsa());
    // Each thread runs ~kMultiplyAdds a pass, whatever a round of the path does: a fixed round count
    // gave the AVX2 path passes short enough that thread start-up and the clock's ramp read it far
    // low, under its own linears' rate (docs/history/kernel-measurements.md, "Compute line passes").
    constexpr int64_t kMultiplyAdds = int64_t{8} << 30;  // tens of milliseconds a thread
    std::vector<float> sinks(static_cast<std::size_t>(threads));
    const int64_t rounds = std::max<int64_t>(1, kMultiplyAdds / path.multiplyAdds(1, pairs, sinks.data()));
    std::vector<int64_t> done(static_cast<std::size_t>(threads));
    double best = 0;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = Clock::now();
        onSlices(int64_t{256} * threads, threads, [&](int t, int64_t, int64_t) {
            done[static_cast<std::size_t>(t)] = path.multiplyAdds(rounds, pairs, &sinks[static_cast<std::size_t>(t)]);
        });
        const double seconds = secondsSince(t0);
        int64_t total = 0;
        for (const int64_t d : done) total += d;
        best = std::max(best, 2.0 * static_cast<double>(total) / seconds);
    }
    volatile float sink = sinks[0];  // keep the sums observable
    (void)sink;
    return best;
}

}  // namespace kvscope
