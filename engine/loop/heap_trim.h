// HeapTrim: gives the heap memory freed by finished requests back to the OS (glibc's
// malloc_trim), so a long-running server's RSS follows its live data instead of creeping up as
// the allocator's per-thread arenas fragment (+0.9 MB/min measured under a soak). The engine
// thread calls tick(false) after each step, which trims every kBusyGap under steady load, and
// tick(true) once it has been idle for kIdleGap, which trims if any step ran since the last
// trim. A trim costs about a millisecond.
#pragma once

#include <chrono>

namespace pagoda {

// Sets the allocator up for a long-running server, before its threads start (glibc; elsewhere a
// no-op). Two causes of RSS creep that trimming cannot undo (the soak: +10.8 MiB from
// minute 2 to 30, flat only once they had run their course):
//  - arenas: glibc gives threads their own heap under contention, up to 8 per core; each one
//    keeps its own free memory and fragments on its own, and with 64 HTTP workers they appear
//    one by one over the first minutes. A few arenas serve this server's threads as well.
//  - the mmap threshold: glibc raises it after each large block it frees (up to 32 MiB), so
//    later large buffers (logits, request bodies, activations) come from the heaps and
//    fragment them; fixing the threshold keeps them in their own mappings, unmapped on free.
void bound_heap_growth();

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
