// SPDX-License-Identifier: MIT
#pragma once
// The threads the batch-invariant kernels run on: a pool of their own, not libtorch's OpenMP team.
//
// Why not at::parallel_for: kvscope runs OpenMP with the passive wait policy (util/threads.h says
// why), so every parallel region wakes its threads from the kernel, and a bf16 decode step of a
// 0.5B model opens ~150 regions of 10-300 us each: decode fell far below the memory bound with
// passive OpenMP (docs/history/kernel-measurements.md, "OpenMP wake-ups"). Spinning OpenMP is no
// answer either: it then spins against OpenBLAS's pool in torch-kernel runs. So these workers spin
// briefly between parts of the work (a decode step's gaps are microseconds) and sleep when none
// comes for a while (kSpinBeforeSleep in kernel_threads.cpp), and only the invariant kernels use them.
//
// The work is split into contiguous parts of [0, n), one per thread, as OpenMP's static schedule
// does; the kernels split only along outputs, so the part boundaries never change a bit. Where the
// caller asks for it, a thread done with its part takes what is left of another's, from its far end:
// attention in a prefill, whose later queries see more keys (its caller orders the rows so that the
// halves cost alike, but a VM's two cores need not run at one speed), a decode step's linears,
// whose two halves stream from memory at rates that differ from call to call (invariant_ops.cpp says
// where it was measured; with two streams a thread they had measured no faster for it),
// and a prefill's linears, for those two cores.
// Whatever the call, a part whose thread has not started it when the others are done with theirs is
// computed by them: a worker the scheduler wakes late (behind the caller, on its core) then never
// holds the call up.
#include <cstdint>
#include <functional>

namespace kvscope::kernels {

// Runs work(begin, end) over [0, n) in at most at::get_num_threads() contiguous parts (none of fewer
// than `grain` items, so small n runs on the calling thread), the caller computing the first part.
// (More than 2^31 items run as several such calls, one after another: the pool packs a part's
// bounds in 32 bits each.) Returns when every part is done; an exception from a part is rethrown
// here (the first one).
// One caller at a time uses the pool: a call made while another is running (a second model in
// another thread, or a call from inside a part) runs whole on its own thread, with the same bits.
// With steal > 0 each thread computes its part in ranges of half what is left of it (at least
// `steal` items), then takes what is left of the others' parts, `steal` items at a time from their
// ends (work then runs on more, smaller ranges: only for work with little cost per call). Without,
// a thread done with its part takes only a whole part that no thread has started.
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& work,
                 int64_t steal = 0);

// Whether every worker the pool has started is asleep (idle for longer than it spins); waits for a
// call in progress to end. Lets a test give work to a sleeping worker without guessing how long it
// takes to fall asleep.
bool workersAsleep();

}  // namespace kvscope::kernels
