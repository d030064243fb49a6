// SPDX-License-Identifier: MIT
// The invariant kernels' own thread pool (core/kernels/kernel_threads.h): how it splits, steals,
// hands parts back and forth, fails and nests. The kernels' bits never depend on it: parts only
// split outputs (invariant_kernels_test.cpp checks the thread counts).
#include "core/kernels/kernel_threads.h"
#include "support/test_support.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kvscope {
namespace {

// The kernels' own thread pool: every index once, in contiguous parts of at least `grain`, on as
// many threads as --threads; a failure reaches the caller. (Nested and concurrent calls, which run
// whole on their caller's thread with the same bits: invariant_kernels_test.cpp.)
TEST(KernelThreads, EveryIndexOnceInContiguousPartsOnAtMostTheThreadCount) {
    const test::ThreadCountGuard restoreThreads;
    for (const int threads : {1, 2, 3}) {
        at::set_num_threads(threads);
        for (const int64_t n : {1, 2, 5, 14, 18, 152, 2374}) {
            for (const int64_t grain : {1, 4, 4096}) {
                for (const int64_t steal : {0, 1, 3}) {
                    std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
                    std::atomic<int> parts{0};
                    kernels::parallelFor(
                        n, grain,
                        [&](int64_t begin, int64_t end) {
                            ++parts;
                            EXPECT_LT(begin, end);
                            for (int64_t i = begin; i < end; ++i) ++seen[static_cast<std::size_t>(i)];
                        },
                        steal);
                    for (int64_t i = 0; i < n; ++i)
                        ASSERT_EQ(seen[static_cast<std::size_t>(i)], 1)
                            << "n=" << n << " i=" << i << " steal=" << steal;
                    if (steal == 0) {  // with stealing, a part may come in several calls
                        EXPECT_LE(parts, std::min<int64_t>(threads, (n + grain - 1) / grain))
                            << "n=" << n << " grain=" << grain;
                    }
                }
            }
        }
    }
}

// A part's bounds are packed in 32 bits: a call of more items than that (the elementwise ops of a
// very long prefill of a large model could reach it) still covers each index once, in both modes.
TEST(KernelThreads, ACallOfMoreItemsThan32BitsHoldCoversThemAll) {
    const test::ThreadCountGuard restoreThreads;
    at::set_num_threads(2);
    const int64_t n = (int64_t{1} << 32) + 5;
    for (const int64_t steal : {int64_t{0}, int64_t{1} << 29}) {
        std::mutex mutex;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        kernels::parallelFor(
            n, 1,
            [&](int64_t begin, int64_t end) {
                const std::lock_guard<std::mutex> lock(mutex);
                ranges.emplace_back(begin, end);
            },
            steal);
        std::sort(ranges.begin(), ranges.end());
        int64_t covered = 0;
        for (const auto& [begin, end] : ranges) {
            ASSERT_EQ(begin, covered) << "steal=" << steal;
            ASSERT_LT(begin, end);
            covered = end;
        }
        EXPECT_EQ(covered, n) << "steal=" << steal;
    }
}

// Waits until `happened` holds, for at most 30 s (a test's thread is not scheduled forever behind
// another); false if it never did.
template <typename Condition>
bool waitUntil(const Condition& happened) {
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!happened())
        if (std::chrono::steady_clock::now() > giveUp)
            return false;
        else
            std::this_thread::yield();
    return true;
}

// A thread done with its part takes the rest of a slower one's, from its end; without stealing,
// never once its owner has started it. Here the caller's part (the first half) holds at its first
// item until the worker has done its whole part (without stealing) or taken one of the caller's
// items (with): what it waits for happens on the worker's schedule, not on a guessed delay.
TEST(KernelThreads, AThreadDoneEarlyTakesTheRestOfASlowerPartOnlyWhenAsked) {
    const test::ThreadCountGuard restoreThreads;
    at::set_num_threads(2);
    const std::thread::id caller = std::this_thread::get_id();
    for (const int64_t steal : {0, 1}) {
        std::vector<std::thread::id> ranOn(40);
        std::atomic<int> elsewhere{0}, firstHalfElsewhere{0};
        bool waited = false;
        kernels::parallelFor(
            40, 1,
            [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                    const std::thread::id self = std::this_thread::get_id();
                    ranOn[static_cast<std::size_t>(i)] = self;
                    if (self != caller) {
                        firstHalfElsewhere += i < 20;
                        ++elsewhere;
                    } else if (i == 0) {
                        waited = waitUntil([&] { return steal ? firstHalfElsewhere > 0 : elsewhere == 20; });
                    }
                }
            },
            steal);
        EXPECT_TRUE(waited) << "steal=" << steal;
        if (steal == 0) {
            EXPECT_EQ(firstHalfElsewhere, 0);
        } else {
            EXPECT_GT(firstHalfElsewhere, 0);
        }
        EXPECT_EQ(std::count(ranOn.begin(), ranOn.end(), std::thread::id{}), 0);
    }
}

// A worker asleep (idle for longer than it spins) wakes in tens of microseconds; the caller's part
// here takes nanoseconds, so the caller finds the worker's part not started and computes it too,
// instead of waiting for the worker (what a worker the scheduler woke behind the caller, on its own
// core, cost in time slices). Tried several times: a wake-up faster than the caller once is no failure.
TEST(KernelThreads, TheCallerComputesAPartWhoseWorkerHasNotStartedInsteadOfWaiting) {
    const test::ThreadCountGuard restoreThreads;
    at::set_num_threads(2);
    const std::thread::id caller = std::this_thread::get_id();
    int callerRanEverything = 0;
    for (int attempt = 0; attempt < 50 && callerRanEverything == 0; ++attempt) {
        ASSERT_TRUE(waitUntil(kernels::workersAsleep)) << "the idle worker never went to sleep";
        std::vector<std::thread::id> ranOn(2);
        kernels::parallelFor(2, 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) ranOn[static_cast<std::size_t>(i)] = std::this_thread::get_id();
        });
        callerRanEverything += ranOn[0] == caller && ranOn[1] == caller;
    }
    EXPECT_EQ(callerRanEverything, 1);
    // The worker the caller left out takes its part of the calls that follow: the caller holds its
    // own part until the worker has run an item.
    std::atomic<int> elsewhere{0};
    bool waited = false;
    kernels::parallelFor(400, 1, [&](int64_t begin, int64_t end) {
        if (std::this_thread::get_id() != caller) elsewhere += static_cast<int>(end - begin);
        if (std::this_thread::get_id() == caller && begin == 0) waited = waitUntil([&] { return elsewhere > 0; });
    });
    EXPECT_TRUE(waited);
    EXPECT_GT(elsewhere, 0);
}

TEST(KernelThreads, AFailingPartReachesTheCallerAndThePoolKeepsWorking) {
    const test::ThreadCountGuard restoreThreads;
    at::set_num_threads(2);
    for (const int64_t failing : {0, 99}) {  // the caller's own part, then a worker's
        EXPECT_THROW(kernels::parallelFor(100, 1,
                                          [&](int64_t begin, int64_t end) {
                                              if (begin <= failing && failing < end) throw std::runtime_error("part");
                                          }),
                     std::runtime_error);
    }
    std::atomic<int64_t> sum{0};
    kernels::parallelFor(100, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) sum += i;
    });
    EXPECT_EQ(sum, 4950);
}

}  // namespace
}  // namespace kvscope
