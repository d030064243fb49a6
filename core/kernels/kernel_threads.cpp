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

// How long an idle worker spins before it sleeps: longer than the gaps inside a decode step and
// between two steps (choosing a token over a 152k vocabulary takes ~1-2 ms), short enough that an
// idle program gives its cores back at once to a person's eye.
constexpr std::chrono::milliseconds kSpinBeforeSleep{5};

void relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// One worker's mailbox, on its own cache lines: the caller writes a part and raises `ticket`; the
// worker runs it and lowers the pool's `pending`. Only the workers a call needs are ever woken.
struct alignas(64) Slot {
    std::atomic<uint64_t> ticket{0};
    const std::function<void(int64_t, int64_t)>* work = nullptr;
    int64_t part = 0;
    std::exception_ptr failure;
    std::atomic<bool> sleeping{false};
    std::mutex mutex;  // guards the sleep, nothing else
    std::condition_variable wake;
};

// What is left of one part, [next, end), packed in one word so that its owner (from the front) and
// another thread done with its own part (from the back) claim items with one compare-and-swap.
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
        // Without stealing (or with too many items to pack) each part is one piece for its owner.
        stealing_ = steal > 0 && n < (int64_t{1} << 31);
        parts_ = parts;
        piece_ = stealing_ ? steal : chunk;
        for (int64_t p = 0; p < parts; ++p)
            remainders_[static_cast<std::size_t>(p)].reset(p * chunk, std::min(n, (p + 1) * chunk));
        ++generation_;
        pending_.store(static_cast<int>(parts - 1), std::memory_order_relaxed);
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
        while (pending_.load(std::memory_order_acquire) > 0) relax();
        for (int64_t p = 1; p < parts && !failure; ++p) failure = slots_[static_cast<std::size_t>(p - 1)]->failure;
        if (failure) std::rethrow_exception(failure);
    }

private:
    // Part `self` from its front, a piece at a time, then what the other parts still have, from
    // their backs (the far end from where their owners are reading).
    void drain(int64_t self, const std::function<void(int64_t, int64_t)>& work) {
        int64_t begin = 0, end = 0;
        while (remainders_[static_cast<std::size_t>(self)].claim(piece_, false, begin, end)) work(begin, end);
        for (int64_t k = 1; stealing_ && k < parts_; ++k) {
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
            try {
                drain(s->part, *s->work);
            } catch (...) {
                s->failure = std::current_exception();
            }
            pending_.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    // Spins until the slot's ticket moves past `done`, then sleeps; returns the new ticket.
    static uint64_t awaitTicket(Slot& s, uint64_t done) {
        using Clock = std::chrono::steady_clock;
        const auto sleepAt = Clock::now() + kSpinBeforeSleep;
        for (int spins = 0;; ++spins) {
            const uint64_t ticket = s.ticket.load(std::memory_order_acquire);
            if (ticket != done) return ticket;
            if (spins % 256 == 255 && Clock::now() >= sleepAt) break;
            relax();
        }
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
    std::atomic<int> pending_{0};
    std::vector<std::unique_ptr<Slot>> slots_;  // worker i computes part i + 1
    std::vector<Remainder> remainders_;          // one per part of the current call
    bool stealing_ = false;                      // the current call's
    int64_t parts_ = 0, piece_ = 0;
};

}  // namespace

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& work, int64_t steal) {
    if (n <= 0) return;
    // Never destroyed: detached workers may still be spinning on it while the process exits.
    static Pool* const pool = new Pool;
    pool->run(n, grain, steal, work);
}

}  // namespace kvscope::kernels
