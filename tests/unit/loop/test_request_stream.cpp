// ChannelStream: the engine -> reader channel (ordering, timeouts, done(), usage, abort).
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "engine/loop/request_stream.h"

using namespace pagoda;
using namespace std::chrono_literals;

TEST_CASE("deltas arrive in order; done after every choice finished and the queue drained") {
  int aborts = 0;
  ChannelStream s(2, 7, [&] { ++aborts; });
  CHECK_FALSE(s.next(1ms));  // times out
  Delta a;
  a.index = 0;
  a.tokens = {5, 6};
  s.push(a);
  Delta b;
  b.index = 1;
  b.tokens = {9};
  b.finish = FinishReason::Stop;
  s.push(b);
  CHECK_FALSE(s.done());
  auto d = s.next(1ms);
  REQUIRE(d);
  CHECK(d->tokens == std::vector<int32_t>{5, 6});
  Delta c;
  c.index = 0;
  c.finish = FinishReason::Length;
  s.push(c);
  CHECK_FALSE(s.done());  // two deltas still queued
  CHECK(s.next(1ms)->index == 1);
  CHECK(s.next(1ms)->finish == FinishReason::Length);
  CHECK(s.done());
  CHECK_FALSE(s.next(10s));  // returns at once when done
  s.push(a);                 // ignored after the end
  CHECK(s.done());
  const Usage u = s.usage();
  CHECK(u.prompt_tokens == 7);
  CHECK(u.completion_tokens == 3);
  s.abort();
  s.abort();
  CHECK(aborts == 1);
  CHECK(s.abort_requested());
}

TEST_CASE("a reader blocked in next() wakes on a push from another thread") {
  ChannelStream s(1, 1, nullptr);
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    Delta d;
    d.text = "hi";
    d.finish = FinishReason::Stop;
    s.push(d);
  });
  auto d = s.next(30s);
  t.join();
  REQUIRE(d);
  CHECK(d->text == "hi");
  CHECK(s.done());
}
