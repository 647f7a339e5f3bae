// WorkerPool: a mutex, a condition variable and a deque (see worker_pool.h).
#include "server/http/worker_pool.h"

namespace pagoda::server {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::push(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stopping_) {
      jobs_.push_back(std::move(job));
      cv_.notify_one();
      return;
    }
  }
  job(false);
}

int WorkerPool::idle() const {
  std::lock_guard<std::mutex> lk(mu_);
  return idle_ - (int)jobs_.size();  // woken workers may not have taken theirs yet
}

int WorkerPool::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)jobs_.size();
}

void WorkerPool::shutdown() {
  std::deque<Job> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(jobs_);
  }
  cv_.notify_all();
  for (Job& j : dropped) j(false);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopping
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    job(true);
    lk.lock();
  }
}

}  // namespace pagoda::server
