// HeapTrim: gives the heap memory freed by finished requests back to the OS (glibc's
// malloc_trim), so a long-running server's RSS follows its live data instead of creeping up as
// the allocator's per-thread arenas fragment (issue 15: +0.9 MB/min under a soak). The engine
// thread calls tick(false) after each step, which trims every kBusyGap under steady load, and
// tick(true) once it has been idle for kIdleGap, which trims if any step ran since the last
// trim. A trim costs about a millisecond.
#pragma once

#include <chrono>

namespace pagoda {

class HeapTrim {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kIdleGap{5};
  static constexpr std::chrono::seconds kBusyGap{30};

  // `idle`: the engine has rested kIdleGap with no work. True when it trimmed.
  bool tick(bool idle, Clock::time_point now = Clock::now());

 private:
  Clock::time_point last_ = Clock::now();
  bool worked_since_ = false;  // steps ran since the last trim (else there is nothing new to give back)
};

}  // namespace pagoda
