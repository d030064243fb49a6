// SPDX-License-Identifier: MIT
#pragma once
// What `kvscope bench` measures of the machine itself, beside the model: the memory's bandwidth, as
// STREAM measures it, and the invariant kernels' multiply-add rate from registers.
#include <cstddef>
#include <memory>
#include <vector>

namespace kvscope {

struct Bandwidth {
    double read = 0, triad = 0;       // bytes per second, the best pass
    std::vector<double> readPasses;   // each pass's read (the best of its stream counts)
};
// The size of each bandwidth probe array, by STREAM's rule: at least 4 times the last-level cache,
// so that no pass can be served from it (at least 256 MiB; at most an eighth of the memory, for the
// three arrays of the triad). A fixed 256 MiB read fit the 480 MiB L3 of a Sapphire Rapids VM,
// and its read figure then moved from run to run with what the cache still held
// (docs/history/kernel-measurements.md, "Probe array size").
std::size_t streamArrayBytes(std::size_t lastLevelCacheBytes, std::size_t physicalMemoryBytes);
// This machine's last-level cache (the highest cache level of CPU 0, from sysfs); 0 if unknown.
std::size_t lastLevelCacheBytes();
// This machine's memory for streamArrayBytes.
std::size_t physicalMemoryBytes();
// STREAM's method: three arrays far larger than the caches (streamArrayBytes), first touched and
// then streamed by as many threads as libtorch computes with, each its own slice, vectorised loops.
// As in STREAM, the arrays are mapped once and kept for the probe's life (runBenchmark: the whole
// run), so that no probe hands memory back to the kernel between the rows it brackets: on a VM that
// reports free pages to its host, that work lands in the next seconds' timings (machine_probes.cpp
// has the figures).
class BandwidthProbe {
public:
    explicit BandwidthProbe(std::size_t bytesPerArray);
    ~BandwidthProbe();
    BandwidthProbe(const BandwidthProbe&) = delete;
    BandwidthProbe& operator=(const BandwidthProbe&) = delete;

    // Best of `passes`: triad counts two arrays read and one written; read counts one array, read by
    // each thread as 1, 2 and 4 sequential streams side by side (the best of them: one stream per
    // core under-reads a machine whose prefetchers keep few misses in flight per stream).
    Bandwidth measure(int passes = 5) const;
    // One such read pass, bytes per second.
    double readPass() const;

private:
    struct Arrays;
    std::unique_ptr<Arrays> arrays_;
};

// The invariant kernels' multiply-adds per second from registers, on as many threads as libtorch
// computes with, in the pair order or the 16-lane order; best of `passes`, FLOP per second.
double measureMultiplyAdds(bool pairs, int passes = 3);

}  // namespace kvscope
