// WorkerPool: a mutex, a deque of jobs and a stack of idle workers, each waiting on its own
// condition variable (see worker_pool.h).
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
      if (!idle_.empty()) {
        Idle* w = idle_.back();  // the most recently idle: its memory is the warmest
        idle_.pop_back();
        w->woken = true;
        w->cv.notify_one();
      }
      return;
    }
  }
  job(false);
}

int WorkerPool::idle() const {
  std::lock_guard<std::mutex> lk(mu_);
  return (int)idle_.size();
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
    for (Idle* w : idle_) {
      w->woken = true;
      w->cv.notify_one();
    }
    idle_.clear();
  }
  for (Job& j : dropped) j(false);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void WorkerPool::work() {
  Idle self;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (jobs_.empty()) {
      if (stopping_) return;
      self.woken = false;
      idle_.push_back(&self);
      self.cv.wait(lk, [&] { return self.woken; });
      continue;  // woken for a job (another worker may have taken it first) or to stop
    }
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    job(true);
    lk.lock();
  }
}

}  // namespace pagoda::server
