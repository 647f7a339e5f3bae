#include "engine/loop/heap_trim.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pagoda {

void bound_heap_growth() {
#if defined(__GLIBC__)
  // glibc's own environment variables, when set, say otherwise.
  if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 4);
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 << 10);
#endif
}

bool HeapTrim::tick(bool idle, Clock::time_point now) {
  if (!idle) {
    worked_since_ = true;
    if (now - last_ < kBusyGap) return false;
  } else if (!worked_since_) {
    return false;
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  last_ = now;
  worked_since_ = !idle;
  return true;
}

}  // namespace pagoda
