// The threads that run complete requests for the connection loop (connection_loop.h): a FIFO
// of jobs and a fixed set of workers, with the counts the loop decides by (idle workers) and
// /metrics shows (jobs waiting for a worker). The worker that went idle last takes the next
// job (a stack of idle workers): under a load that needs a few of the workers, the same few do
// all the work, so the memory each thread ties up (its stack pages, its allocator caches and
// arena, thread-local scratch) stays that of the few rather than growing, over minutes, to that
// of every worker in the pool (the creep a memory soak showed).
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
  int idle() const;     // workers waiting for a job (and not already woken for one)
  int queued() const;   // jobs not yet taken by a worker
  // Drops the jobs still queued (each called with false), then waits for the running ones.
  void shutdown();

 private:
  struct Idle {
    std::condition_variable cv;
    bool woken = false;
  };
  void work();

  mutable std::mutex mu_;
  std::deque<Job> jobs_;
  std::vector<Idle*> idle_;  // waiting workers, the most recently idle last
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace pagoda::server
