#include "kernels/cpu/thread_pool.h"

#include <algorithm>
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
    : n_threads_(n_threads > 0 ? n_threads : std::max(1u, std::thread::hardware_concurrency())),
      shares_(new Share[static_cast<size_t>(n_threads_)]) {
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

void ThreadPool::call_guarded(int64_t begin, int64_t end, int thread_idx) {
  tls_in_job = this;
  try {
    job_call_(job_ctx_, begin, end, thread_idx);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!job_error_) job_error_ = std::current_exception();
  }
  tls_in_job = nullptr;
}

void ThreadPool::run_range(int thread_idx) {
  const auto [begin, end] = range(job_tasks_, n_threads_, thread_idx);
  if (begin < end) call_guarded(begin, end, thread_idx);
}

int64_t ThreadPool::claim(int share, bool from_back) {
  std::atomic<uint64_t>& s = shares_[static_cast<size_t>(share)].lo_hi;
  uint64_t v = s.load();
  for (;;) {
    const uint64_t lo = v & 0xFFFFFFFFu, hi = v >> 32;
    if (lo >= hi) return -1;
    const uint64_t taken = from_back ? hi - 1 : lo;
    if (s.compare_exchange_weak(v, from_back ? taken << 32 | lo : v + 1)) return static_cast<int64_t>(taken);
  }
}

void ThreadPool::run_chunks(int thread_idx) {
  auto run_chunk = [&](int64_t c) {
    const int64_t begin = c * job_chunk_;
    call_guarded(begin, std::min(job_tasks_, begin + job_chunk_), thread_idx);
  };
  for (int64_t c; (c = claim(thread_idx, false)) >= 0;) run_chunk(c);
  for (int k = 1; k < n_threads_; ++k) {
    const int victim = (thread_idx + k) % n_threads_;
    for (int64_t c; (c = claim(victim, true)) >= 0;) run_chunk(c);
  }
}

void ThreadPool::run(int64_t n_tasks, int64_t chunk, Trampoline call, void* ctx) {
  if (tls_in_job == this) throw std::logic_error("ThreadPool::parallel_for called from inside one of its own jobs");
  if (n_tasks <= 0) return;
  std::lock_guard<std::mutex> submit(submit_mutex_);
  job_call_ = call;
  job_ctx_ = ctx;
  job_tasks_ = n_tasks;
  job_chunk_ = chunk;
  job_error_ = nullptr;
  const bool dynamic = chunk > 0;
  const uint64_t job = ++generation_ << 2 | (dynamic ? 1 : 0);
  if (dynamic) {
    // Before publishing: workers claim from the shares at once.
    const int64_t chunks = (n_tasks + chunk - 1) / chunk;
    if (chunks > int64_t{0xFFFFFFFF}) throw std::invalid_argument("ThreadPool::parallel_for_dynamic: more than 2^32 - 1 chunks");
    for (int t = 0; t < n_threads_; ++t) {
      const auto [lo, hi] = range(chunks, n_threads_, t);
      shares_[static_cast<size_t>(t)].lo_hi.store(static_cast<uint64_t>(hi) << 32 | static_cast<uint64_t>(lo));
    }
  }
  if (!workers_.empty()) {
    if (!dynamic) pending_.store(n_threads_ - 1);
    {
      // Publishing under the mutex means a worker that checked the state and is about to sleep
      // cannot miss this job.
      std::lock_guard<std::mutex> lock(wake_mutex_);
      state_.store(job | 2);
    }
    wake_cv_.notify_all();
  }
  if (dynamic) {
    run_chunks(0);
    if (!workers_.empty()) state_.store(job);  // closed: workers that have not joined yet never will
  } else {
    run_range(0);
  }
  if (!workers_.empty()) {
    auto done = [&] { return dynamic ? active_.load() == 0 : pending_.load(std::memory_order_acquire) == 0; };
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
  uint64_t seen = 0;  // the generation of the last job this worker looked at
  auto notify_done = [this] {
    // Last worker out: wake the submitter if it went to sleep. Taking the mutex orders this
    // notify after the submitter's check-then-wait, so the wakeup cannot be lost.
    { std::lock_guard<std::mutex> lock(done_mutex_); }
    done_cv_.notify_one();
  };
  for (;;) {
    auto has_work = [&] { return (state_.load() >> 2) != seen || stop_.load(); };
    if (!spin_until(has_work)) {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_cv_.wait(lock, has_work);
    }
    if (stop_.load()) return;
    const uint64_t job = state_.load();
    seen = job >> 2;
    if (job & 1) {
      if (!(job & 2)) continue;  // closed before this worker got here
      active_.fetch_add(1);
      // Still the same open job: the submitter, which closes it before waiting for active_,
      // will wait for this worker too. Otherwise it may already have returned: touch nothing.
      if (state_.load() == job) run_chunks(thread_idx);
      if (active_.fetch_sub(1) == 1) notify_done();
    } else {
      run_range(thread_idx);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) notify_done();
    }
  }
}

}  // namespace pagoda::cpu
