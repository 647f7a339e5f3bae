// ThreadPool: coverage and static partitioning, dynamic chunks, exceptions, idle workers that do
// not spin.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <chrono>
#include <ctime>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

using pagoda::cpu::ThreadPool;

TEST_CASE("parallel_for covers every task exactly once with the static split") {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    REQUIRE(pool.size() == threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<int> owner(static_cast<size_t>(n), -1);
      std::atomic<int> empty_ranges{0};  // Catch assertions are not thread-safe: count instead
      pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
        if (b >= e) empty_ranges++;
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++, owner[static_cast<size_t>(i)] = t;
      });
      REQUIRE(empty_ranges == 0);
      for (int64_t i = 0; i < n; ++i) {
        REQUIRE(hits[static_cast<size_t>(i)] == 1);
        // Ownership follows ThreadPool::range exactly (deterministic partitioning).
        const int t = owner[static_cast<size_t>(i)];
        const auto [b, e] = ThreadPool::range(n, threads, t);
        REQUIRE((b <= i && i < e));
      }
    }
  }
}

TEST_CASE("the calling thread takes range 0 and many jobs run back to back") {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::atomic<int64_t> sum{0};
  std::atomic<int> wrong_thread{0};
  for (int rep = 0; rep < 20000; ++rep) {
    pool.parallel_for(2, [&](int64_t b, int64_t e, int t) {
      if ((t == 0) != (std::this_thread::get_id() == caller)) wrong_thread++;
      sum += e - b;
    });
  }
  REQUIRE(sum == 40000);
  REQUIRE(wrong_thread == 0);
}

TEST_CASE("parallel_for_dynamic covers every task once in whole chunks, back to back with static jobs") {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 64, 1001})
      for (int64_t chunk : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_chunks{0};
        pool.parallel_for_dynamic(n, chunk, [&](int64_t b, int64_t e, int t) {
          // Chunks start on a multiple of `chunk` and end at the next one (or at n).
          if (b % chunk != 0 || e != std::min(n, b + chunk) || t < 0 || t >= threads) bad_chunks++;
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        REQUIRE(bad_chunks == 0);
        for (int64_t i = 0; i < n; ++i) REQUIRE(hits[static_cast<size_t>(i)] == 1);
      }
    // Alternating static and dynamic jobs, many times: a worker that misses a dynamic job (the
    // caller took every chunk) must still run the next static one.
    std::atomic<int64_t> sum{0};
    for (int rep = 0; rep < 5000; ++rep) {
      pool.parallel_for_dynamic(4, 4, [&](int64_t b, int64_t e, int) { sum += e - b; });
      pool.parallel_for(threads, [&](int64_t b, int64_t e, int) { sum += e - b; });
    }
    REQUIRE(sum == 5000 * (4 + threads));
  }
}

TEST_CASE("parallel_for_dynamic: each thread runs a front part of its own share in order, others take the rest") {
  // Whatever the timing: of thread t's share (the static rule over chunk indices), t runs a
  // prefix, front to back, and the other threads run the remaining suffix. That is what keeps
  // each thread on one ascending stream of a decode matmul's weights.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 200; ++rep) {
      const int64_t n = 97, chunk = 2, chunks = (n + chunk - 1) / chunk;
      std::mutex m;
      std::vector<std::vector<int64_t>> order(static_cast<size_t>(threads));
      std::vector<int> runner(static_cast<size_t>(chunks), -1);
      pool.parallel_for_dynamic(n, chunk, [&](int64_t b, int64_t, int t) {
        std::lock_guard<std::mutex> lock(m);
        order[static_cast<size_t>(t)].push_back(b / chunk);
        runner[static_cast<size_t>(b / chunk)] = t;
      });
      for (int t = 0; t < threads; ++t) {
        const auto [lo, hi] = ThreadPool::range(chunks, threads, t);
        int64_t own = lo;
        while (own < hi && runner[static_cast<size_t>(own)] == t) ++own;  // the owner's prefix
        for (int64_t c = own; c < hi; ++c) REQUIRE(runner[static_cast<size_t>(c)] != t);
        for (int64_t c = lo; c < hi; ++c) REQUIRE(runner[static_cast<size_t>(c)] >= 0);
        std::vector<int64_t> mine;
        for (int64_t c : order[static_cast<size_t>(t)])
          if (c >= lo && c < hi) mine.push_back(c);
        REQUIRE(std::is_sorted(mine.begin(), mine.end()));
      }
    }
  }
}

TEST_CASE("parallel_for_dynamic: while one thread is held up in a chunk, the other runs the rest") {
  // Whichever thread claims chunk 0 does not finish it until the other thread has run a chunk,
  // so the call completes only if the remaining chunks go to whoever is free (bounded: gives up
  // after 10 s, and then the other thread has run nothing, which fails the test).
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  std::atomic<int> ran_by[2] = {0, 0};
  pool.parallel_for_dynamic(50, 1, [&](int64_t b, int64_t, int t) {
    if (b == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (ran_by[1 - t] == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    ran++;
    ran_by[t]++;
  });
  REQUIRE(ran == 50);
  REQUIRE(ran_by[0] >= 1);
  REQUIRE(ran_by[1] >= 1);
}

TEST_CASE("exceptions propagate to the caller and the pool stays usable") {
  ThreadPool pool(3);
  CHECK_THROWS_AS(pool.parallel_for(3, [](int64_t, int64_t, int t) {
    if (t == 2) throw std::runtime_error("boom");
  }), std::runtime_error);
  std::atomic<int> n{0};
  pool.parallel_for(3, [&](int64_t b, int64_t e, int) { n += static_cast<int>(e - b); });
  CHECK(n == 3);
  // Nesting is refused rather than deadlocking.
  CHECK_THROWS_AS(pool.parallel_for(1, [&](int64_t, int64_t, int) { pool.parallel_for(1, [](int64_t, int64_t, int) {}); }),
                  std::logic_error);
}

TEST_CASE("idle workers block instead of spinning") {
  ThreadPool pool(2);
  pool.parallel_for(2, [](int64_t, int64_t, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin window
  timespec a{}, b{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  const double cpu_ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  CHECK(cpu_ms < 20.0);  // a spinning worker would burn ~200 ms here
}
