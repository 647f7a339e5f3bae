// The HTTP layer under hostile and busy clients, in process on loopback against the
// FakeEngine: slowloris headers and bodies, thousands of idle sockets, a keep-alive pool flood
// beyond the admission bound, the connection bound, body memory, HTTP hygiene on raw sockets,
// pipelining, auth, and /health during a drain. Counts and times are bounded; timeouts are
// shortened (header timeout 1-2 s) so the suite runs in seconds.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "tests/support/fake_api_server.h"
#include "tests/support/raw_http.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double scrape(int port, const std::string& name) {
  return metric_value(http_get(port, "/metrics").body, name);
}

std::string completion(int max_tokens = 2) {
  return raw_post("/v1/completions", json{{"prompt", "a"}, {"max_tokens", max_tokens}}.dump());
}

// A normal request on a fresh connection: its status and how long it took.
std::pair<int, double> timed_request(int port) {
  auto t0 = Clock::now();
  HttpResult r = http_post(port, "/v1/completions", json{{"prompt", "a"}, {"max_tokens", 2}});
  return {r.status, ms_since(t0)};
}

// Skips the calling test (with a warning) when this process may not open `fds` descriptors.
bool enough_fds(long fds) {
  long limit = raise_open_file_limit(fds + 256);
  if (limit >= fds + 256) return true;
  WARN("skipped: the open-file limit " << limit << " is below the " << fds + 256 << " this needs");
  return false;
}

FakeApiServer::Config fast_timeouts(double header_timeout_s) {
  FakeApiServer::Config c;
  c.http.header_timeout_s = header_timeout_s;
  return c;
}

}  // namespace

TEST_CASE("hygiene: malformed framing is refused at once, on raw sockets", "[reliability]") {
  FakeApiServer s;
  struct Case {
    const char* what;
    std::string request;
    int status;
  };
  const std::string body = R"({"prompt":"a","max_tokens":2})";
  auto post = [&](const std::string& headers) {
    return "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n" + body;
  };
  std::vector<Case> cases = {
      {"no Content-Length", post(""), 411},
      {"negative Content-Length", post("Content-Length: -5\r\n"), 400},
      {"non-numeric Content-Length", post("Content-Length: ten\r\n"), 400},
      {"Content-Length beyond 64 bits", post("Content-Length: 123456789012345678901234\r\n"), 400},
      {"Content-Length over the body limit", post("Content-Length: 1073741824\r\n"), 413},
      {"conflicting Content-Length", post("Content-Length: 29\r\nContent-Length: 30\r\n"), 400},
      {"Transfer-Encoding with Content-Length",
       post("Content-Length: 29\r\nTransfer-Encoding: chunked\r\n"), 400},
      {"bare LF", "GET /health HTTP/1.1\nHost: x\n\n", 400},
      {"folded header", "GET /health HTTP/1.1\r\nHost: x\r\n y\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    RawConnection conn(s.port);
    REQUIRE(conn.ok());
    auto t0 = Clock::now();
    conn.send(c.request);
    RawResponse r = conn.read_response(milliseconds(1000));
    CHECK(r.status == c.status);
    CHECK(ms_since(t0) < 500);
    CHECK(r.header("connection") == "close");
    json j = json::parse(r.body, nullptr, false);
    CHECK(j.contains("error"));
    CHECK(conn.closed_by_server());
  }
  CHECK(timed_request(s.port).first == 200);
}

TEST_CASE("pipelined requests are answered in order", "[reliability]") {
  FakeApiServer s;
  RawConnection conn(s.port);
  conn.send("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + completion(3) +
            raw_post("/v1/completions", json{{"prompt", "b"}, {"max_tokens", 2}, {"stream", true}}.dump()) +
            "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  RawResponse models = conn.read_response();
  CHECK(models.status == 200);
  CHECK(json::parse(models.body)["object"] == "list");
  RawResponse done = conn.read_response();
  CHECK(done.status == 200);
  CHECK(json::parse(done.body)["usage"]["completion_tokens"] == 3);
  RawResponse streamed = conn.read_response();
  CHECK(streamed.status == 200);
  CHECK(streamed.body.find("data: [DONE]") != std::string::npos);
  CHECK(conn.read_response().status == 200);

  // Keep-alive has no request cap: the same connection serves on.
  for (int i = 0; i < 20; ++i) {
    conn.send(completion(1));
    RawResponse again = conn.read_response();
    REQUIRE(again.status == 200);
    CHECK(again.header("connection") != "close");
  }

  // "Connection: close" on the first: it is answered, says so, and the connection closes.
  RawConnection closing(s.port);
  closing.send("GET /health HTTP/1.1\r\nConnection: close\r\n\r\nGET /health HTTP/1.1\r\n\r\n");
  RawResponse first = closing.read_response();
  CHECK(first.status == 200);
  CHECK(first.header("connection") == "close");
  CHECK(closing.closed_by_server());

  // Blank lines between requests are skipped; a client that half-closes still gets its answer.
  RawConnection half(s.port);
  half.send("\r\nGET /health HTTP/1.1\r\n\r\n");
  half.half_close();
  CHECK(half.read_response().status == 200);
  CHECK(half.closed_by_server());
}

TEST_CASE("request bodies: chunked, 100-continue, and at the minimum rate", "[reliability]") {
  FakeApiServer::Config c = fast_timeouts(1);
  c.http.body_min_rate = 2000;
  FakeApiServer s(c);
  SECTION("chunked") {
    RawConnection conn(s.port);
    std::string body = R"({"prompt":"a","max_tokens":2})";
    char rest[16];
    std::snprintf(rest, sizeof rest, "%zx", body.size() - 5);  // chunk sizes are hexadecimal
    conn.send("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n" +
              body.substr(0, 5) + "\r\n" + rest + "\r\n" + body.substr(5) + "\r\n0\r\n\r\n");
    RawResponse r = conn.read_response();
    CHECK(r.status == 200);
    // Trailers are accepted and ignored, and the connection serves on.
    char whole[16];
    std::snprintf(whole, sizeof whole, "%zx", body.size());
    conn.send("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(whole) +
              "\r\n" + body + "\r\n0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n");
    RawResponse t = conn.read_response();
    CHECK(t.status == 200);
    CHECK(json::parse(t.body)["usage"]["completion_tokens"] == 2);
  }
  SECTION("Expect: 100-continue") {
    RawConnection conn(s.port);
    std::string body = R"({"prompt":"a","max_tokens":2})";
    conn.send("POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n");
    CHECK(conn.read_response().status == 100);
    conn.send(body);
    CHECK(conn.read_response().status == 200);
  }
  SECTION("a body sent slower than the minimum rate is cut with 408 and counted") {
    RawConnection conn(s.port);
    conn.send("POST /v1/completions HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{");
    auto t0 = Clock::now();
    RawResponse r;
    while (r.status == 0 && ms_since(t0) < 4000) {
      conn.send(std::string(50, ' '));  // 500 bytes/s, under the 2000 required
      r = conn.read_response(milliseconds(100));
    }
    CHECK(r.status == 408);
    CHECK(ms_since(t0) > 900);
    CHECK(scrape(s.port, "pagoda_http_slow_clients_total{model_name=\"fake-model\",phase=\"body\"}") == 1);
  }
  SECTION("a body at a good rate passes") {
    RawConnection conn(s.port);
    std::string body = R"({"prompt":"a","max_tokens":2})" + std::string(6000, ' ');
    conn.send("POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n");
    for (size_t i = 0; i < body.size(); i += 1000) {  // 10 KB/s
      conn.send(body.substr(i, 1000));
      std::this_thread::sleep_for(milliseconds(100));
    }
    CHECK(conn.read_response().status == 200);
  }
}

TEST_CASE("auth: the whole header must be exactly 'Bearer KEY', once", "[reliability]") {
  FakeApiServer::Config c;
  c.api_key = "sekret";
  FakeApiServer s(c);
  auto status = [&](const std::string& headers) {
    RawConnection conn(s.port);
    conn.send("GET /v1/models HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n");
    return conn.read_response().status;
  };
  CHECK(status("Authorization: Bearer sekret\r\n") == 200);
  CHECK(status("Authorization: bearer sekret\r\n") == 200);  // the scheme is case-insensitive
  const char nul[] = "Authorization: Bearer sekret\0junk\r\n";
  CHECK(status(std::string(nul, sizeof nul - 1)) == 400);  // NUL in any header value
  CHECK(status("Authorization: Bearer sekretjunk\r\n") == 401);
  CHECK(status("Authorization: Bearer sekret junk\r\n") == 401);
  CHECK(status("Authorization: Bearer sek%72et\r\n") == 401);  // not percent-decoded
  CHECK(status("Authorization: Bearer sekret\r\nAuthorization: Bearer sekret\r\n") == 401);
  CHECK(status("Authorization: Bearer sekret\r\nauthorization: Bearer other\r\n") == 401);
  CHECK(status("") == 401);
  CHECK(http_get(s.port, "/health").status == 200);
}

TEST_CASE("/health answers 503 draining during a drain; work in flight finishes", "[reliability]") {
  FakeApiServer::Config c;
  c.engine.step_time = milliseconds(10);
  FakeApiServer s(c);
  RawConnection idle(s.port);
  REQUIRE(idle.send("GET /health HTTP/1.1\r\n\r\n"));
  REQUIRE(idle.read_response().status == 200);
  auto running = std::async(std::launch::async, [&] {
    return http_post(s.port, "/v1/completions", json{{"prompt", "a"}, {"max_tokens", 50}});
  });
  REQUIRE(wait_for([&] { return s.engine.stats().running == 1; }));
  s.http->server().begin_drain();
  CHECK(idle.closed_by_server());  // idle keep-alive connections close
  for (int i = 0; i < 3; ++i) {
    RawConnection conn(s.port);
    REQUIRE(conn.send("GET /health HTTP/1.1\r\n\r\n"));
    RawResponse h = conn.read_response();
    CHECK(h.status == 503);
    CHECK(json::parse(h.body)["status"] == "draining");
    CHECK(h.header("connection") == "close");
  }
  CHECK(http_post(s.port, "/v1/completions", json{{"prompt", "a"}}).status == 503);
  HttpResult r = running.get();
  CHECK(r.status == 200);
  CHECK(r.j()["usage"]["completion_tokens"] == 50);
}

TEST_CASE("slowloris: slow headers and slow bodies hold no worker, and are cut", "[reliability]") {
  constexpr int kEach = 500;
  if (!enough_fds(4 * kEach + 64)) return;
  FakeApiServer::Config c = fast_timeouts(2);
  c.http.worker_threads = 8;
  FakeApiServer s(c);
  std::vector<std::unique_ptr<RawConnection>> heads, bodies;
  for (int i = 0; i < kEach; ++i) {
    heads.push_back(std::make_unique<RawConnection>(s.port));
    heads.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
    bodies.push_back(std::make_unique<RawConnection>(s.port));
    // Under 64 KiB: a body that needs no reservation of body memory, so each is read (slowly)
    // rather than kept waiting for memory.
    bodies.back()->send("POST /v1/completions HTTP/1.1\r\nContent-Length: 50000\r\n\r\n{\"pro");
  }
  REQUIRE(wait_for([&] { return s.http->server().connection_stats().open >= 2 * kEach; }));
  // One more header line each: the header deadline does not restart on activity.
  for (auto& h : heads) h->send("X-Slow: 1\r\n");
  auto [status, ms] = timed_request(s.port);
  CHECK(status == 200);
  CHECK(ms < 1000);
  auto [status2, ms2] = timed_request(s.port);
  CHECK(status2 == 200);
  CHECK(ms2 < 1000);
  std::printf("figures: slowloris %d+%d: normal requests %.1f ms, %.1f ms\n", kEach, kEach, ms, ms2);
  // Past the 2 s header timeout (and the body's grace), every slow client has been answered
  // 408 and counted.
  CHECK(wait_for([&] {
    return scrape(s.port, "pagoda_http_slow_clients_total{model_name=\"fake-model\",phase=\"headers\"}") == kEach &&
           scrape(s.port, "pagoda_http_slow_clients_total{model_name=\"fake-model\",phase=\"body\"}") == kEach;
  }, 8));
  CHECK(heads[7]->read_response(milliseconds(100)).status == 408);
  CHECK(bodies[7]->read_response(milliseconds(100)).status == 408);
}

TEST_CASE("2,000 idle sockets, fresh and kept alive, delay no one", "[reliability]") {
  constexpr int kIdle = 2000;
  if (!enough_fds(2 * kIdle + 64)) return;
  // On a loaded host the set-up (2,000 connects, 1,000 round trips) can outlast the header
  // timeout, which then closes the fresh sockets that never spoke (by design, and not what this
  // test is about): the timeout is set beyond the test's own bounds.
  FakeApiServer s(fast_timeouts(600));
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<RawConnection>(s.port));
    if (i % 2 == 0) {  // half of them used once, then idle between requests
      idle.back()->send("GET /health HTTP/1.1\r\n\r\n");
      REQUIRE(idle.back()->read_response().status == 200);
    }
  }
  REQUIRE(wait_for([&] { return s.http->server().connection_stats().open >= kIdle; }));
  for (int i = 0; i < 3; ++i) {
    auto [status, ms] = timed_request(s.port);
    CHECK(status == 200);
    CHECK(ms < 1000);
    std::printf("figures: %d idle sockets: normal request %.1f ms\n", kIdle, ms);
  }
  // The kept-alive ones still serve.
  idle[0]->send("GET /health HTTP/1.1\r\n\r\n");
  CHECK(idle[0]->read_response().status == 200);
}

TEST_CASE("open connections are bounded: idle ones make room, else a fast 503", "[reliability]") {
  FakeApiServer::Config c;
  c.http.max_connections = 50;
  FakeApiServer s(c);
  // (The start-up's /health probe may still be closing.)
  REQUIRE(wait_for([&] { return s.http->server().connection_stats().open == 0; }));
  std::vector<std::unique_ptr<RawConnection>> conns;
  for (int i = 0; i < 50; ++i) conns.push_back(std::make_unique<RawConnection>(s.port));
  REQUIRE(wait_for([&] { return s.http->server().connection_stats().open == 50; }));
  RawConnection over(s.port);
  auto t0 = Clock::now();
  over.send("GET /health HTTP/1.1\r\n\r\n");
  RawResponse r = over.read_response(milliseconds(1000));
  CHECK(r.status == 503);
  CHECK(ms_since(t0) < 200);
  CHECK(r.header("retry-after") == "1");
  CHECK(over.closed_by_server());
  // Once connections are idle between requests, a newcomer takes the oldest one's place.
  for (auto& conn : conns) {
    conn->send("GET /health HTTP/1.1\r\n\r\n");
    REQUIRE(conn->read_response().status == 200);
  }
  CHECK(http_get(s.port, "/health").status == 200);
  // One of the idle connections made room (the oldest; under load several share its idle time).
  CHECK(wait_for([&] {
    for (auto& conn : conns)
      if (conn->closed_by_server(milliseconds(10))) return true;
    return false;
  }));
  CHECK(scrape(s.port, "pagoda_http_connections_evicted_total") >= 1);
  CHECK(scrape(s.port, "pagoda_http_connections_rejected_total") == 1);
}

TEST_CASE("a keep-alive pool flood beyond the admission bound gets 429 at once", "[reliability]") {
  constexpr int kClients = 40, kPerClient = 8;
  FakeApiServer::Config c;
  c.max_inflight = 12;  // --max-seqs 4 --max-queue 8: the engine's bound, which HttpServer reads
  c.http.worker_threads = 20;  // the default for those: max-seqs + max-queue + 8
  c.engine.max_running = 4;
  c.engine.step_time = milliseconds(5);
  FakeApiServer s(c);
  std::atomic<int> ok{0}, busy{0}, other{0}, late{0}, no_retry_after{0};
  std::atomic<double> worst_429_ms{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&] {
      httplib::Client cl("127.0.0.1", s.port);
      cl.set_keep_alive(true);
      cl.set_tcp_nodelay(true);
      cl.set_read_timeout(30, 0);
      const std::string body = json{{"prompt", "a"}, {"max_tokens", 40}}.dump();
      for (int k = 0; k < kPerClient; ++k) {
        auto t0 = Clock::now();
        auto r = cl.Post("/v1/completions", body, "application/json");
        double ms = ms_since(t0);
        if (r && r->status == 200) {
          ++ok;
        } else if (r && r->status == 429) {
          ++busy;
          if (!r->has_header("Retry-After")) ++no_retry_after;
          if (ms > 100) ++late;
          double prev = worst_429_ms;
          while (ms > prev && !worst_429_ms.compare_exchange_weak(prev, ms)) {
          }
        } else {
          ++other;
        }
      }
    });
  for (auto& t : clients) t.join();
  INFO("ok " << ok << ", 429 " << busy << ", worst 429 " << worst_429_ms << " ms");
  std::printf("figures: flood %dx%d: %d ok, %d 429, slowest 429 %.1f ms\n", kClients, kPerClient,
              ok.load(), busy.load(), worst_429_ms.load());
  CHECK(ok + busy == kClients * kPerClient);
  CHECK(other == 0);
  CHECK(ok >= 12);
  CHECK(busy >= kClients * kPerClient / 2);
  CHECK(no_retry_after == 0);
  CHECK(late == 0);
}

TEST_CASE("requests waiting for a worker count in pagoda_requests_waiting", "[reliability]") {
  FakeApiServer::Config c;
  c.http.worker_threads = 4;  // fewer workers than requests: the rest wait in the HTTP layer
  c.engine.max_running = 2;
  c.engine.step_time = milliseconds(20);
  FakeApiServer s(c);
  constexpr int kRequests = 12;
  std::vector<std::future<HttpResult>> fs;
  for (int i = 0; i < kRequests; ++i)
    fs.push_back(std::async(std::launch::async, [&] {
      return http_post(s.port, "/v1/completions", json{{"prompt", "a"}, {"max_tokens", 15}});
    }));
  REQUIRE(wait_for([&] {
    return s.http->server().connection_stats().waiting == kRequests - 4 &&
           s.engine.stats().running == 2 && s.engine.stats().waiting == 2;
  }));
  // 2 running in the engine, 2 waiting in it, 8 received and waiting for a worker.
  std::string m = http_get(s.port, "/metrics").body;
  CHECK(metric_value(m, "pagoda_requests_waiting") >= kRequests - 2 - 1);  // one may just have moved
  CHECK(metric_value(m, "pagoda_http_requests_queued") >= kRequests - 4 - 1);
  for (auto& f : fs) CHECK(f.get().status == 200);
  CHECK(scrape(s.port, "pagoda_requests_waiting") == 0);
}

TEST_CASE("large bodies wait briefly for body memory, else get 503 at once", "[reliability]") {
  FakeApiServer::Config c;
  c.max_body = 1 << 20;
  c.http.max_buffered_body_bytes = 2 << 20;  // two 900 KB bodies at a time
  FakeApiServer s(c);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> most_held{0};
  std::thread sampler([&] {
    while (!done) {
      uint64_t held = s.http->server().connection_stats().body_bytes_held;
      if (held > most_held) most_held = held;
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  std::string big = json{{"prompt", std::string(900000, 'x')}, {"max_tokens", 1}}.dump();
  // Two are held and at most two more wait in line (a budget's worth); the rest are refused
  // at once, with Retry-After.
  std::vector<std::future<std::pair<HttpResult, double>>> fs;
  for (int i = 0; i < 12; ++i)
    fs.push_back(std::async(std::launch::async, [&] {
      auto t0 = Clock::now();
      HttpResult r = http_post(s.port, "/v1/completions", big);
      return std::make_pair(r, ms_since(t0));
    }));
  int served = 0, refused = 0;
  for (auto& f : fs) {
    auto [r, ms] = f.get();
    if (r.status == 400) {  // served: the prompt is longer than the fake engine's context
      CHECK(r.body.find("context_length_exceeded") != std::string::npos);
      ++served;
    } else {
      CHECK(r.status == 503);
      CHECK(r.body.find("body_memory_busy") != std::string::npos);
      CHECK(r.headers.count("Retry-After") == 1);
      CHECK(ms < 2000);  // not after a long wait
      ++refused;
    }
  }
  CHECK(served >= 2);
  CHECK(served + refused == 12);
  done = true;
  sampler.join();
  CHECK(most_held > 0);
  CHECK(most_held <= (2u << 20));
  CHECK(wait_for([&] { return s.http->server().connection_stats().body_bytes_held == 0; }));
}
