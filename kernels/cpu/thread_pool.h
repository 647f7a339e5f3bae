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
// A pool runs one job at a time: concurrent parallel_for calls from different threads are
// serialized; calling parallel_for from inside a job of the same pool is a logic error and throws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
    run(n_tasks, [](void* ctx, int64_t b, int64_t e, int t) { (*static_cast<F*>(ctx))(b, e, t); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end, int thread_idx);

  void run(int64_t n_tasks, Trampoline call, void* ctx);
  void worker_loop(int thread_idx);
  void run_range(int thread_idx);

  const int n_threads_;
  std::vector<std::thread> workers_;

  std::mutex submit_mutex_;  // one job at a time

  // The current job; written by the submitter before bumping generation_.
  Trampoline job_call_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_tasks_ = 0;
  std::exception_ptr job_error_;
  std::mutex error_mutex_;

  std::atomic<uint64_t> generation_{0};  // bumped once per job (under wake_mutex_)
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stop_{false};

  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;  // workers sleep here between jobs
  std::mutex done_mutex_;
  std::condition_variable done_cv_;  // the submitter sleeps here waiting for workers
};

}  // namespace pagoda::cpu
