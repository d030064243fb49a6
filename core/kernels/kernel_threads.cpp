// SPDX-License-Identifier: MIT
#include "core/kernels/kernel_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvscope::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// The most items one run of the pool covers: a part's bounds are packed in 32 bits each (Remainder).
constexpr int64_t kMaxItemsPerCall = int64_t{1} << 31;

// How long an idle worker spins before it sleeps: longer than the gaps inside a decode step and
// between two steps (choosing a token over a 152k vocabulary takes ~1-2 ms), short enough that an
// idle program gives its cores back at once to a person's eye.
constexpr std::chrono::milliseconds kSpinBeforeSleep{5};

// How long a waiting thread spins on the pause instruction alone before it yields its core between
// checks: longer than the threads' usual gaps (microseconds), so that they rarely get there. The
// scheduler sometimes wakes a worker on the caller's core while the other core idles, and a thread
// spinning there holds off the one it waits for until the next tick; a yield hands the core over at
// once (docs/history/kernel-measurements.md, "Pool wake-ups").
constexpr std::chrono::microseconds kSpinBeforeYield{20};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// Waits until ready() holds (true) or `giveUpAt` passes (false): paused spins, then yields
// (kSpinBeforeYield says why).
template <typename Ready>
bool spinUntil(const Ready& ready, Clock::time_point giveUpAt = Clock::time_point::max()) {
    const auto yieldAt = Clock::now() + kSpinBeforeYield;
    bool yielding = false;
    // Unsigned: a wait for a long part counts spins for as long as it takes, and wraps harmlessly.
    for (uint32_t spins = 0;; ++spins) {
        if (ready()) return true;
        if (spins % 256 == 255) {
            const auto now = Clock::now();
            if (now >= giveUpAt) return false;
            yielding = now >= yieldAt;
        }
        if (yielding)
            std::this_thread::yield();
        else
            relax();
    }
}

// One worker's mailbox, on its own cache lines: the caller writes a part and raises `ticket`. The
// part then goes to whichever of the worker and the caller first raises `taken` to that ticket: the
// worker when it starts in time; otherwise the caller, once every item is claimed (it took the
// part's items itself), so that a late worker never holds a call up (the same section). A worker
// that took its part raises `finished` to the ticket when done. Only the
// workers a call needs are woken.
struct alignas(64) Slot {
    std::atomic<uint64_t> ticket{0}, taken{0}, finished{0};
    const std::function<void(int64_t, int64_t)>* work = nullptr;
    int64_t part = 0;
    std::exception_ptr failure;
    std::atomic<bool> sleeping{false};
    std::mutex mutex;  // guards the sleep, nothing else
    std::condition_variable wake;

    // True for the one thread that raises `taken` to `ticket`.
    bool take(uint64_t ticket) {
        uint64_t seen = taken.load(std::memory_order_acquire);
        while (seen < ticket)
            if (taken.compare_exchange_weak(seen, ticket, std::memory_order_acq_rel)) return true;
        return false;
    }
};

// What is left of one part, [next, end), packed in one word so that its owner (from the front) and
// another thread done with its own part (from the back) claim items with one compare-and-swap
// (parallelFor runs a call of more than kMaxItemsPerCall items as several).
struct alignas(64) Remainder {
    std::atomic<uint64_t> span{0};

    static uint64_t pack(int64_t next, int64_t end) {
        return static_cast<uint64_t>(next) | static_cast<uint64_t>(end) << 32;
    }
    void reset(int64_t next, int64_t end) { span.store(pack(next, end), std::memory_order_relaxed); }
    // The owner takes half of what is left of its part (at least `piece` items) from the front: long
    // ranges while there is much left, `piece` at the end. Another thread takes `piece` from the
    // back. False when nothing is left.
    bool claim(int64_t piece, bool fromBack, int64_t& begin, int64_t& end) {
        uint64_t seen = span.load(std::memory_order_acquire);
        for (;;) {
            const auto next = static_cast<int64_t>(seen & 0xffffffffu), last = static_cast<int64_t>(seen >> 32);
            if (next >= last) return false;
            const int64_t taken = std::min(fromBack ? piece : std::max(piece, (last - next + 1) / 2), last - next);
            begin = fromBack ? last - taken : next;
            end = begin + taken;
            const uint64_t left = fromBack ? pack(next, last - taken) : pack(next + taken, last);
            if (span.compare_exchange_weak(seen, left, std::memory_order_acq_rel)) return true;
        }
    }
};

class Pool {
public:
    void run(int64_t n, int64_t grain, int64_t steal, const std::function<void(int64_t, int64_t)>& work) {
        const int64_t threads = std::max(1, at::get_num_threads());
        int64_t parts = std::min(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
        std::unique_lock<std::mutex> mine(busy_, std::try_to_lock);
        if (parts <= 1 || !mine.owns_lock()) return work(0, n);
        const int64_t chunk = (n + parts - 1) / parts;
        parts = (n + chunk - 1) / chunk;  // no empty part
        grow(static_cast<std::size_t>(parts - 1));
        // Without stealing each part is one piece for its owner.
        parts_ = parts;
        piece_ = steal > 0 ? steal : chunk;
        for (int64_t p = 0; p < parts; ++p)
            remainders_[static_cast<std::size_t>(p)].reset(p * chunk, std::min(n, (p + 1) * chunk));
        ++generation_;
        for (int64_t p = 1; p < parts; ++p) {
            Slot& s = *slots_[static_cast<std::size_t>(p - 1)];
            s.work = &work, s.part = p;
            s.failure = nullptr;
            s.ticket.store(generation_, std::memory_order_seq_cst);
            if (s.sleeping.load(std::memory_order_seq_cst)) {
                const std::lock_guard<std::mutex> lock(s.mutex);
                s.wake.notify_one();
            }
        }
        std::exception_ptr failure;
        try {
            drain(0, work);
        } catch (...) {
            failure = std::current_exception();
        }
        // Every item is claimed by now. A worker that has not taken its part yet never will; one
        // that has may still be computing what it claimed.
        for (int64_t p = 1; p < parts; ++p) {
            Slot& s = *slots_[static_cast<std::size_t>(p - 1)];
            if (s.take(generation_)) continue;
            spinUntil([&] { return s.finished.load(std::memory_order_acquire) == generation_; });
            if (!failure) failure = s.failure;
        }
        if (failure) std::rethrow_exception(failure);
    }

    // Every worker started so far asleep; waits for a call in progress to end first.
    bool allAsleep() {
        const std::lock_guard<std::mutex> idle(busy_);
        return std::all_of(slots_.begin(), slots_.end(),
                           [](const std::unique_ptr<Slot>& s) { return s->sleeping.load(std::memory_order_seq_cst); });
    }

private:
    // Part `self` from its front, a piece at a time, then what the other parts still have, from
    // their backs (the far end from where their owners are reading). Without stealing a part is one
    // piece, so only a part its owner has not started yet is left to take.
    void drain(int64_t self, const std::function<void(int64_t, int64_t)>& work) {
        int64_t begin = 0, end = 0;
        while (remainders_[static_cast<std::size_t>(self)].claim(piece_, false, begin, end)) work(begin, end);
        for (int64_t k = 1; k < parts_; ++k) {
            Remainder& other = remainders_[static_cast<std::size_t>((self + k) % parts_)];
            while (other.claim(piece_, true, begin, end)) work(begin, end);
        }
    }

    void grow(std::size_t workers) {
        if (remainders_.size() < workers + 1) remainders_ = std::vector<Remainder>(workers + 1);
        while (slots_.size() < workers) {
            slots_.push_back(std::make_unique<Slot>());
            std::thread(&Pool::serve, this, slots_.back().get()).detach();  // the pool is never destroyed
        }
    }

    void serve(Slot* s) {
        uint64_t done = 0;
        for (;;) {
            done = awaitTicket(*s, done);
            if (!s->take(done)) continue;  // the caller was done first, and took the part back
            try {
                drain(s->part, *s->work);
            } catch (...) {
                s->failure = std::current_exception();
            }
            s->finished.store(done, std::memory_order_release);
        }
    }

    // Spins until the slot's ticket moves past `done`, then sleeps; returns the new ticket.
    static uint64_t awaitTicket(Slot& s, uint64_t done) {
        const auto raised = [&] { return s.ticket.load(std::memory_order_acquire) != done; };
        if (spinUntil(raised, Clock::now() + kSpinBeforeSleep)) return s.ticket.load(std::memory_order_acquire);
        std::unique_lock<std::mutex> lock(s.mutex);
        s.sleeping.store(true, std::memory_order_seq_cst);
        // Seen under the same total order as the caller's raise-then-check: either the caller sees
        // `sleeping` and notifies under the mutex, or this load sees the raised ticket.
        s.wake.wait(lock, [&] { return s.ticket.load(std::memory_order_seq_cst) != done; });
        s.sleeping.store(false, std::memory_order_relaxed);
        return s.ticket.load(std::memory_order_acquire);
    }

    std::mutex busy_;  // held by the one caller the pool serves
    uint64_t generation_ = 0;
    std::vector<std::unique_ptr<Slot>> slots_;  // worker i computes part i + 1
    std::vector<Remainder> remainders_;          // one per part of the current call
    int64_t parts_ = 0, piece_ = 0;
};

Pool& thePool() {
    // Never destroyed: detached workers may still be spinning on it while the process exits.
    static Pool* const pool = new Pool;
    return *pool;
}

}  // namespace

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& work, int64_t steal) {
    if (n <= 0) return;
    Pool* const pool = &thePool();
    if (n <= kMaxItemsPerCall) return pool->run(n, grain, steal, work);
    for (int64_t base = 0; base < n; base += kMaxItemsPerCall)
        pool->run(std::min(kMaxItemsPerCall, n - base), grain, steal,
                  [&](int64_t begin, int64_t end) { work(base + begin, base + end); });
}

bool workersAsleep() { return thePool().allAsleep(); }

}  // namespace kvscope::kernels
