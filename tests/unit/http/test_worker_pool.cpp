// WorkerPool: jobs run in order of arrival, the most recently idle worker takes the next one
// (so a light load keeps to a few threads), and shutdown hands back the jobs no worker took.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "server/http/worker_pool.h"

using pagoda::server::WorkerPool;

namespace {

// Waits (bounded) until the pool has `n` idle workers.
bool wait_idle(const WorkerPool& pool, int n) {
  for (int i = 0; i < 2000 && pool.idle() != n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return pool.idle() == n;
}

}  // namespace

TEST_CASE("worker pool: one job at a time stays on one worker") {
  WorkerPool pool(8);
  REQUIRE(wait_idle(pool, 8));
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 50; ++i) {
    std::promise<std::thread::id> where;
    pool.push([&](bool run) {
      CHECK(run);
      where.set_value(std::this_thread::get_id());
    });
    ran_on.insert(where.get_future().get());
    REQUIRE(wait_idle(pool, 8));  // back on the stack before the next job arrives
  }
  CHECK(ran_on.size() == 1);
}

TEST_CASE("worker pool: busy workers, queued jobs, and shutdown") {
  WorkerPool pool(2);
  REQUIRE(wait_idle(pool, 2));
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0}, dropped{0};
  for (int i = 0; i < 2; ++i)
    pool.push([&, gate](bool run) {
      if (run) gate.wait(), ++ran;
    });
  for (int i = 0; i < 3; ++i) pool.push([&](bool run) { ++(run ? ran : dropped); });
  for (int i = 0; i < 2000 && pool.queued() != 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(pool.idle() == 0);
  CHECK(pool.queued() == 3);
  std::thread stopper([&] { pool.shutdown(); });
  for (int i = 0; i < 2000 && pool.queued() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  release.set_value();
  stopper.join();
  CHECK(ran == 2);       // the two running ones finish
  CHECK(dropped == 3);   // the queued ones are handed back, not run
}
