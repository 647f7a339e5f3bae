// A persistent pool of worker threads for the CPU kernels.
//
// parallel_for(n, fn) splits [0, n) into one contiguous range per thread with a fixed, static
// rule (thread t gets [n*t/T, n*(t+1)/T)), so a given n and thread count always produce the same
// split: kernels that must be deterministic can rely on it. The calling thread takes range 0.
//
// Idle behaviour: after finishing a job a worker spins for a short while (kSpinMicros) so that
// back-to-back ops of a forward pass dispatch in well under a microsecond, then blocks on a
// condition variable, so an idle server burns no CPU.
//
// parallel_for_dynamic(n, chunk, fn) gives each thread a home share of the chunks (the static
// rule over chunk indices), which it runs front to back; a thread whose share is done takes
// chunks from the back of the others' shares. It returns as soon as every chunk has run: a
// worker that wakes late (on a shared host, one whose core runs another process for a while)
// finds its share taken over and joins nothing, and threads that run at different speeds finish
// together. Each thread reads one ascending stream of chunks until the shares run out, so a
// kernel that prefetches past the end of its chunk warms the chunk it runs next (handing chunks
// out in one global order made the two threads of a decode matmul alternate, each starting every
// 256 KiB chunk cold). For kernels whose results do not depend on which thread runs which task
// (matmul).
//
// A pool runs one job at a time: concurrent parallel_for calls from different threads are
// serialized; calling parallel_for from inside a job of the same pool is a logic error and throws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace pagoda::cpu {

class ThreadPool {
 public:
  // How long an idle worker (or a caller waiting for workers) spins before blocking.
  static constexpr int kSpinMicros = 50;

  // `n_threads` counts the calling thread: a pool of 1 runs everything inline, with no workers.
  // `n_threads` <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Number of threads that run a job, the caller included.
  int size() const { return n_threads_; }

  // The static range of thread `t` out of `n_threads` for `n_tasks` tasks.
  static std::pair<int64_t, int64_t> range(int64_t n_tasks, int n_threads, int t) {
    return {n_tasks * t / n_threads, n_tasks * (t + 1) / n_threads};
  }

  // Calls fn(begin, end, thread_idx) once per thread whose range is non-empty, in parallel, and
  // returns when all have finished. The first exception thrown by any fn is rethrown here.
  template <class Fn>
  void parallel_for(int64_t n_tasks, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n_tasks, 0, [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<F*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Calls fn(begin, end, thread_idx) for the chunks [c * chunk, min(n_tasks, (c + 1) * chunk)),
  // each once, on whichever threads claim them (the caller claims first), and returns when all
  // have finished. The first exception thrown by any fn is rethrown here. At most 2^32 - 1
  // chunks (std::invalid_argument otherwise).
  template <class Fn>
  void parallel_for_dynamic(int64_t n_tasks, int64_t chunk, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(n_tasks, chunk > 0 ? chunk : 1,
        [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<F*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end, int thread_idx);

  // chunk 0: the static split; > 0: dynamic chunks of that many tasks.
  void run(int64_t n_tasks, int64_t chunk, Trampoline call, void* ctx);
  void worker_loop(int thread_idx);
  void run_range(int thread_idx);
  void run_chunks(int thread_idx);
  // The first (or last) unclaimed chunk of a share, taken; -1 when none is left.
  int64_t claim(int share, bool from_back);
  void call_guarded(int64_t begin, int64_t end, int thread_idx);

  const int n_threads_;
  std::vector<std::thread> workers_;

  std::mutex submit_mutex_;  // one job at a time

  // The current job; written by the submitter before publishing it in state_.
  Trampoline job_call_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_tasks_ = 0;
  int64_t job_chunk_ = 0;
  std::exception_ptr job_error_;
  std::mutex error_mutex_;

  // The published job: generation << 2 | open << 1 | dynamic (stored under wake_mutex_). A
  // static job is run by every thread, and the submitter waits for all (pending_). A dynamic
  // one is open while chunks remain: a worker joins by counting itself in active_ and checking
  // that the same job is still open, so the submitter, which closes it once the chunks are
  // gone, needs to wait only for workers that joined. Never reused, so a stale worker cannot
  // mistake a new job for the one it woke for.
  std::atomic<uint64_t> state_{0};
  uint64_t generation_ = 0;              // the submitter's count (under submit_mutex_)
  std::atomic<int> pending_{0};          // workers still running the current static job
  std::atomic<int> active_{0};           // workers inside a dynamic job
  // The dynamic job's unclaimed chunks of each thread's share, [lo, hi) as lo | hi << 32: the
  // owner claims lo, others claim hi - 1. One cache line each, so owners do not contend.
  struct alignas(64) Share {
    std::atomic<uint64_t> lo_hi{0};
  };
  std::unique_ptr<Share[]> shares_;
  std::atomic<bool> stop_{false};

  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;  // workers sleep here between jobs
  std::mutex done_mutex_;
  std::condition_variable done_cv_;  // the submitter sleeps here waiting for workers
};

}  // namespace pagoda::cpu
