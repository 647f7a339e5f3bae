// The graceful stop (HttpServer::drain_and_stop), in process on loopback against the FakeEngine:
// every request the server accepted before the drain gets its whole answer before the server
// stops, whatever the engine says about its sequences. The cases that once lost a request:
// a response still being written when the engine's last sequence ended (here made long by a
// client that reads late), and requests received but not yet with the engine (parsing, queued
// for a worker, or not yet accepted). Times are bounded.
#include <catch2/catch.hpp>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fake_api_server.h"
#include "tests/support/raw_http.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;
using std::chrono::milliseconds;

namespace {

// The pause drain_and_stop waits with: a plain sleep, never cut short (no second signal).
bool sleep_for_s(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
  return false;
}

std::string completion_request(int max_tokens, bool stream) {
  return raw_post("/v1/completions",
                  json{{"prompt", "a"}, {"max_tokens", max_tokens}, {"stream", stream}}.dump());
}

// The tokens a completed answer holds: from "usage" (plain) or by counting the streamed text
// (one fake token per character); -1 when the answer is cut or malformed.
int answered_tokens(const RawResponse& r, bool stream) {
  if (r.status != 200) return -1;
  if (!stream) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_discarded() ? -1 : j["usage"]["completion_tokens"].get<int>();
  }
  std::vector<std::string> events = sse_events(r.body);
  if (events.empty() || events.back() != "[DONE]") return -1;
  return (int)sse_texts(events, 1).at(0).size();
}

}  // namespace

TEST_CASE("a drain waits for every response to be written in full, to a late reader too",
          "[reliability]") {
  FakeApiServer::Config c;
  c.engine.step_time = milliseconds(10);
  c.engine.max_running = 128;
  c.max_inflight = 128;  // the big request alone holds 32 sequences
  FakeApiServer s(c);
  // An answer larger than the socket buffers on both sides (the server's send buffer grows to
  // 4 MiB at most; 32 choices of 200 tokens, 20 alternatives each: about 6 MB): its write
  // blocks until the client reads, long after the engine has finished every sequence.
  RawConnection late_reader(s.port);
  const int kBigN = 32, kBigTokens = 200;
  REQUIRE(late_reader.send(raw_post(
      "/v1/chat/completions",
      json{{"messages", {{{"role", "user"}, {"content", "a"}}}}, {"max_tokens", kBigTokens},
           {"n", kBigN}, {"logprobs", true}, {"top_logprobs", 20}}
          .dump())));
  // Plain and streamed requests of several lengths, in flight when the drain begins.
  struct InFlight {
    std::unique_ptr<RawConnection> conn;
    int max_tokens;
    bool stream;
  };
  std::vector<InFlight> others;
  for (int max_tokens : {40, 80, 120})
    for (bool stream : {false, true}) {
      others.push_back({std::make_unique<RawConnection>(s.port), max_tokens, stream});
      REQUIRE(others.back().conn->send(completion_request(max_tokens, stream)));
    }
  REQUIRE(wait_for([&] { return s.engine.stats().running >= 1 + (int)others.size(); }));

  auto stopped = std::async(std::launch::async, [&] {
    // A grace far beyond the work (about 2 s): a loaded host must not turn it into a cancel.
    return s.http->server().drain_and_stop(/*grace_s=*/120, /*abort_wait_s=*/5, sleep_for_s);
  });
  // Every sequence ends and every Generation is released (the engine has nothing in flight:
  // what once let the server stop), yet the big answer is still being written.
  REQUIRE(wait_for([&] { return s.handlers->inflight_seqs() == 0; }, 120));
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(stopped.wait_for(milliseconds(0)) == std::future_status::timeout);

  RawResponse big = late_reader.read_response(milliseconds(60000));
  INFO(big.body.size() << " bytes");
  CHECK(big.body.size() > (size_t(9) << 19));  // 4.5 MiB: more than the buffers hold
  REQUIRE(big.status == 200);
  json j = json::parse(big.body, nullptr, false);
  REQUIRE(!j.is_discarded());
  REQUIRE(j["choices"].size() == (size_t)kBigN);
  for (const json& ch : j["choices"]) CHECK(ch["logprobs"]["content"].size() == (size_t)kBigTokens);
  for (InFlight& f : others) {
    INFO("max_tokens " << f.max_tokens << (f.stream ? ", streamed" : ""));
    CHECK(answered_tokens(f.conn->read_response(milliseconds(60000)), f.stream) == f.max_tokens);
  }
  REQUIRE(stopped.wait_for(milliseconds(60000)) == std::future_status::ready);
  CHECK(stopped.get());
}

TEST_CASE("requests sent before a drain are each answered, none dropped", "[reliability]") {
  FakeApiServer::Config c;
  c.engine.step_time = milliseconds(1);
  // Fewer workers than requests: some wait in the worker queue when the drain begins.
  c.http.worker_threads = 4;
  FakeApiServer s(c);
  constexpr int kRequests = 24;
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < kRequests; ++i) {
    conns.push_back(std::make_unique<RawConnection>(s.port));
    REQUIRE(conns.back()->send(completion_request(5 + i, i % 2 == 1)));
  }
  // At once: most are read but not yet with the engine, some not yet accepted.
  CHECK(s.http->server().drain_and_stop(/*grace_s=*/120, /*abort_wait_s=*/5, sleep_for_s));
  int served = 0;
  for (int i = 0; i < kRequests; ++i) {
    INFO("request " << i);
    RawResponse r = conns[i]->read_response(milliseconds(20000));
    // Served in full, or refused for the drain (routed after it began): never left unanswered.
    CHECK((r.status == 200 || r.status == 503));
    if (r.status == 200) {
      CHECK(answered_tokens(r, i % 2 == 1) == 5 + i);
      ++served;
    }
  }
  INFO(served << " of " << kRequests << " served, the rest refused with 503");
  SUCCEED();
}

TEST_CASE("an answer written after a drain began says 'Connection: close'", "[reliability]") {
  // A kept-alive client that sees no "close" may send its next request as the server closes the
  // connection: that request would be reset, never answered.
  FakeApiServer::Config c;
  c.engine.step_time = milliseconds(10);
  FakeApiServer s(c);
  RawConnection conn(s.port);
  REQUIRE(conn.send(completion_request(40, false)));  // keep-alive: HTTP/1.1, no "close"
  REQUIRE(wait_for([&] { return s.engine.stats().running == 1; }));
  auto stopped = std::async(std::launch::async, [&] {
    return s.http->server().drain_and_stop(/*grace_s=*/120, /*abort_wait_s=*/5, sleep_for_s);
  });
  RawResponse r = conn.read_response(milliseconds(60000));
  CHECK(answered_tokens(r, false) == 40);
  CHECK(r.header("connection") == "close");
  CHECK(conn.closed_by_server());
  CHECK(stopped.get());
}

TEST_CASE("a request sent on a just-accepted connection as the drain ends is answered, not reset",
          "[reliability]") {
  // Nothing is in flight, so the drain could stop at once; but a client that has just connected
  // is about to send its request. The loop counts such a connection for a moment (and counts
  // once more with the listener closed), so the request gets its 503 rather than a reset.
  FakeApiServer s;
  RawConnection conn(s.port);
  REQUIRE(wait_for([&] { return s.http->server().connection_stats().open == 1; }));
  auto stopped = std::async(std::launch::async, [&] {
    return s.http->server().drain_and_stop(/*grace_s=*/120, /*abort_wait_s=*/5, sleep_for_s);
  });
  std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(conn.send(completion_request(5, false)));
  RawResponse r = conn.read_response(milliseconds(20000));
  CHECK(r.status == 503);
  CHECK(r.header("connection") == "close");
  CHECK(conn.closed_by_server());
  REQUIRE(stopped.wait_for(milliseconds(20000)) == std::future_status::ready);
  CHECK(stopped.get());
}
