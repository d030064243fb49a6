// SPDX-License-Identifier: MIT
#pragma once
namespace kvscope {

// Uses `threads` intra-op threads (0: all cores) in every pool libtorch computes on: its own (OpenMP,
// MKL) and OpenBLAS's. libtorch here defaults to one thread unless told.
void configureThreads(int threads);

// libtorch runs elementwise kernels on OpenMP threads and fp32 matrix products on OpenBLAS's own
// threads. With OpenMP's default active wait, the two pools spin against each other on the same
// cores and a decode step after a long prefill runs at half speed (measured: matrix-vector products
// at 10 GB/s instead of 25). OpenMP reads OMP_WAIT_POLICY once, when the library loads, so a program
// must ask for the passive policy before that: this re-executes the program with
// OMP_WAIT_POLICY=PASSIVE unless the variable is already set. Call it first thing in main().
void ensurePassiveOpenMpWait(char** argv);

// Asks Intel MKL (the pip wheel's BLAS; Debian's libtorch uses OpenBLAS, which ignores this) for
// results that repeat from run to run: MKL_CBWR=AUTO, unless the variable is already set. With its
// default (conditional numerical reproducibility off) MKL may split a product between its threads
// differently from run to run, and the demo trainer's test once failed in CI that way: two trainings
// of one recipe in one process, other weights. Running that test 3-4 processes at a time on 2 cores
// it failed 2 times in 163 with MKL's default (other gradients at the first step, the same loss)
// and 0 in 181 with AUTO: too few to prove the cause, and what MKL's documentation prescribes for
// reproducible results. MKL reads the variable at its first product, so call this before any: a
// process that computed with MKL before keeps its mode. Only the trainer asks (its claim: same
// recipe, same threads, same weights); inference keeps MKL's default, as transformers runs it.
void askMklForRepeatableSums();

}  // namespace kvscope
