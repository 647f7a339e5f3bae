#include "engine/core/heap_trim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pagoda {

void bound_heap_growth() {
#if defined(__GLIBC__)
  mallopt(M_ARENA_MAX, 4);
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
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
