// HeapTrim's timing rules (the trim itself is glibc's): every kBusyGap under load, once after
// the engine rests if anything ran since the last trim, never twice for the same work.
#include <catch2/catch.hpp>

#include "engine/loop/heap_trim.h"

using namespace pagoda;

TEST_CASE("heap trim: busy every kBusyGap, idle once per burst of work") {
  HeapTrim t;
  const auto t0 = HeapTrim::Clock::now();
  CHECK_FALSE(t.tick(true, t0));                        // nothing ran yet
  CHECK_FALSE(t.tick(false, t0 + std::chrono::seconds(1)));
  CHECK(t.tick(true, t0 + std::chrono::seconds(7)));    // rested after work
  CHECK_FALSE(t.tick(true, t0 + std::chrono::seconds(20)));  // nothing new since
  CHECK_FALSE(t.tick(false, t0 + std::chrono::seconds(21)));
  CHECK_FALSE(t.tick(false, t0 + std::chrono::seconds(36)));  // 29 s after the last trim
  CHECK(t.tick(false, t0 + std::chrono::seconds(38)));   // 31 s
  CHECK(t.tick(true, t0 + std::chrono::seconds(44)));    // steps ran since (the busy trim's own step)
  CHECK_FALSE(t.tick(true, t0 + std::chrono::seconds(50)));
}
