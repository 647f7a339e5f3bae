// The host's ceilings that the kernel benchmark compares the matmuls against, measured rather
// than taken from a data sheet: the streaming-read memory bandwidth (decode reads every weight
// once per token) and the int8 dot-product peak of the instructions the int8 kernels use
// (prefill is compute-bound), both with every thread of the pool busy.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace pagoda::bench {

// The machine may be shared: with cpu_time set, a run's time is the process CPU time divided
// by `threads` (what the work costs when it has the cores), instead of wall time.
struct Timing {
  bool cpu_time = false;
  int threads = 1;
};

inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Median time of `reps` calls of f.
template <class F>
double median_seconds(const Timing& timing, int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    f();
    t.push_back(timing.cpu_time ? (process_cpu_seconds() - c0) / timing.threads
                                : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// GB/s of N threads summing a 1 GiB buffer (median of 5 passes).
double stream_read_gbps(cpu::ThreadPool& pool, const Timing& timing);

// The same probe kept for reads next to a benchmark's runs: on a shared host the bandwidth
// drifts by a third within a minute, so a figure divided by one measured earlier says more
// about the drift than about the kernel.
class StreamProbe {
 public:
  static constexpr size_t kBytes = size_t(1) << 30;
  StreamProbe();
  // One pass of every thread over its share of the buffer.
  void pass(cpu::ThreadPool& pool);
  // Reads the next `bytes` of the buffer (wrapping to its start), split over the threads as
  // a pass is: a stream read the size of one matrix, to time next to that matrix's matmul.
  void read_next(cpu::ThreadPool& pool, size_t bytes);
  // GB/s of a pass (median of 5): what stream_read_gbps measures, on this probe's buffer.
  double gbps(cpu::ThreadPool& pool, const Timing& timing);

 private:
  // `bytes` from `base` in `chunks` pieces (each a multiple of 128 bytes but the last) over the
  // pool's threads.
  void read(cpu::ThreadPool& pool, const uint8_t* base, size_t bytes, int64_t chunks);

  std::vector<uint8_t> buf_;
  uint8_t* p_ = nullptr;
  size_t next_ = 0;
  std::vector<uint64_t> sink_;  // per thread, so that the sums are not optimized away
};

// Int8 multiply-adds per second x 2 (GOPS), register-only: every thread runs a long chain of
// independent vpdpbusd (AVX-512 VNNI) or vpmaddubsw + vpmaddwd + vpaddd (AVX2) on values held
// in registers, the instruction mix the int8 matmul kernels of the default ISA level use. `what`
// names that mix. Returns 0 (and says so in `what`) on the scalar level.
double int8_peak_gops(cpu::ThreadPool& pool, const Timing& timing, std::string& what);

}  // namespace pagoda::bench
