// SPDX-License-Identifier: MIT
#pragma once
namespace kvscope {

// Uses `threads` intra-op threads (0: all cores) in every pool libtorch computes on: its own (OpenMP,
// MKL) and OpenBLAS's. libtorch here defaults to one thread unless told.
void configureThreads(int threads);

// libtorch runs elementwise kernels on OpenMP threads and fp32 matrix products on OpenBLAS's own
// threads. With OpenMP's default active wait, the two pools spin against each other on the same
// cores and a decode step after a long prefill runs at half speed (docs/history/
// kernel-measurements.md, "OpenMP wait policy"). OpenMP reads OMP_WAIT_POLICY once, when the library loads, so a program
// must ask for the passive policy before that: this re-executes the program with
// OMP_WAIT_POLICY=PASSIVE unless the variable is already set. Call it first thing in main().
void ensurePassiveOpenMpWait(char** argv);

}  // namespace kvscope
