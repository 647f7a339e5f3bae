#include "kernels/cpu/thread_pool.h"

#include <chrono>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PAGODA_CPU_RELAX() _mm_pause()
#else
#define PAGODA_CPU_RELAX() std::this_thread::yield()
#endif

namespace pagoda::cpu {

namespace {

// Spins until pred() holds or kSpinMicros have passed; returns pred().
template <class Pred>
bool spin_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      PAGODA_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

// Set while a thread runs a job of some pool, to refuse nested parallel_for calls.
thread_local const ThreadPool* tls_in_job = nullptr;

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0 ? n_threads : std::max(1u, std::thread::hardware_concurrency())) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_.store(true);
  }
  wake_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_range(int thread_idx) {
  const auto [begin, end] = range(job_tasks_, n_threads_, thread_idx);
  if (begin >= end) return;
  tls_in_job = this;
  try {
    job_call_(job_ctx_, begin, end, thread_idx);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!job_error_) job_error_ = std::current_exception();
  }
  tls_in_job = nullptr;
}

void ThreadPool::run(int64_t n_tasks, Trampoline call, void* ctx) {
  if (tls_in_job == this) throw std::logic_error("ThreadPool::parallel_for called from inside one of its own jobs");
  if (n_tasks <= 0) return;
  std::lock_guard<std::mutex> submit(submit_mutex_);
  job_call_ = call;
  job_ctx_ = ctx;
  job_tasks_ = n_tasks;
  job_error_ = nullptr;
  if (!workers_.empty()) {
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
      // Bumping under the mutex means a worker that checked the generation and is about to
      // sleep cannot miss this job.
      std::lock_guard<std::mutex> lock(wake_mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_cv_.notify_all();
  }
  run_range(0);
  if (!workers_.empty()) {
    auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(done)) {
      std::unique_lock<std::mutex> lock(done_mutex_);
      done_cv_.wait(lock, done);
    }
  }
  if (job_error_) {
    std::exception_ptr e = job_error_;
    job_error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker_loop(int thread_idx) {
  uint64_t seen = 0;
  for (;;) {
    auto has_work = [&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); };
    if (!spin_until(has_work)) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_cv_.wait(lock, has_work);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_range(thread_idx);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Last worker out: wake the submitter if it went to sleep. Taking the mutex orders this
      // notify after the submitter's check-then-wait, so the wakeup cannot be lost.
      { std::lock_guard<std::mutex> lock(done_mutex_); }
      done_cv_.notify_one();
    }
  }
}

}  // namespace pagoda::cpu
