// The threads that run complete requests for the connection loop (connection_loop.h): a FIFO
// of jobs and a fixed set of workers, with the counts the loop decides by (idle workers) and
// /metrics shows (jobs waiting for a worker).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagoda::server {

class WorkerPool {
 public:
  // A job is called once: with true on a worker, or with false (not run) when the pool shuts
  // down before a worker took it.
  using Job = std::function<void(bool run)>;

  explicit WorkerPool(int threads);
  ~WorkerPool();  // shutdown()

  void push(Job job);
  int idle() const;     // workers waiting for a job
  int queued() const;   // jobs not yet taken by a worker
  // Drops the jobs still queued (each called with false), then waits for the running ones.
  void shutdown();

 private:
  void work();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  int idle_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::server
