// 10,000 requests of garbage against the real `pagoda serve`: random methods, paths, headers,
// mutated and random bodies, and raw non-HTTP bytes. The server must answer every HTTP request
// with a status (no 5xx), stay healthy, and leak no KV blocks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <random>

#include "tests/e2e/e2e_fixture.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

constexpr int kRequests = 10000;
constexpr int kThreads = 4;

class Garbage {
 public:
  explicit Garbage(uint64_t seed) : rng_(seed) {}

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  std::string bytes(size_t max_len, bool printable) {
    std::string s(pick((int)max_len + 1), '\0');
    for (char& c : s) c = printable ? (char)(32 + pick(95)) : (char)pick(256);
    return s;
  }

  json value() {
    switch (pick(12)) {
      case 0: return nullptr;
      case 1: return chance(0.5);
      case 2: return pick(5) - 2;
      case 3: return (int64_t)1 << (20 + pick(43));
      case 4: return -((int64_t)1 << pick(62));
      case 5: return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_);
      case 6: return bytes(20, true);
      case 7: return json::array({pick(300), pick(40000)});
      case 8: return json::array({bytes(5, true), pick(3)});
      case 9: return json::object({{bytes(4, true), pick(10)}});
      case 10: return json::array({json::array({pick(32064)}), json::array()});
      default: return 1e308 * (chance(0.5) ? 1 : -1);
    }
  }

  // A valid request of some endpoint, then a few random mutations.
  json body(std::string* path) {
    json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
    std::vector<std::pair<std::string, json>> bases = {
        {"/v1/completions", {{"prompt", "abc"}, {"max_tokens", 2}, {"temperature", 0.5}, {"n", 1},
                             {"stop", {"x"}}, {"logprobs", 1}, {"seed", 3}}},
        {"/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 2}, {"top_p", 0.9},
                                  {"logit_bias", {{"10", 1}}}, {"stream", chance(0.3)}}},
        {"/tokenize", {{"prompt", "hello"}}},
        {"/detokenize", {{"tokens", {1, 2, 3}}}},
    };
    auto& b = bases[pick((int)bases.size())];
    *path = b.first;
    json j = b.second;
    int muts = pick(4);
    for (int m = 0; m < muts; ++m) {
      std::vector<std::string> keys;
      for (auto& [k, v] : j.items()) keys.push_back(k);
      int op = pick(5);
      if (op == 0 && !keys.empty()) {
        j.erase(keys[pick((int)keys.size())]);
      } else if (op == 1 && !keys.empty()) {
        j[keys[pick((int)keys.size())]] = value();
      } else if (op == 2) {
        static const char* known[] = {"n", "max_tokens", "top_k", "min_p", "stream_options",
                                      "messages", "prompt", "top_logprobs", "echo", "n_keep",
                                      "repetition_penalty", "stop_token_ids", "logprobs"};
        j[known[pick(13)]] = value();
      } else if (op == 3) {
        j[bytes(8, true)] = value();
      } else if (j.contains("messages") && j["messages"].is_array()) {
        j["messages"].push_back({{"role", pick(2) ? "assistant" : bytes(6, true)}, {"content", value()}});
      }
    }
    return j;
  }

  std::mt19937_64 rng_;
};

}  // namespace

TEST_CASE("e2e fuzz: 10,000 garbage requests, no crash, no leaked blocks", "[e2e][fuzz]") {
  auto server = start_server({"--ctx-size", "128", "--max-seqs", "8", "--max-queue", "8",
                              "--context-shift", "off", "--timeout", "20", "--log-level", "warn"});
  int port = server->port();
  std::atomic<int> done{0}, server_errors{0}, no_answer{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Garbage g(1000 + t);
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      c.set_keep_alive(true);
      c.set_tcp_nodelay(true);  // else Nagle + delayed ACK add 40 ms to every request
      static const char* paths[] = {"/v1/completions", "/v1/chat/completions", "/tokenize",
                                    "/detokenize", "/health", "/metrics", "/v1/models", "/",
                                    "/v1/completions/../x", "/v1//models", "/%00", "/v1/chat/completions?x=1"};
      static const char* methods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
      for (int i = t; i < kRequests; i += kThreads) {
        if (g.chance(0.02)) {
          // Non-HTTP bytes: the server must just drop the connection.
          raw_exchange(port, g.bytes(300, g.chance(0.5)), 1, std::chrono::milliseconds(50),
                       std::chrono::milliseconds(50));
          ++done;
          continue;
        }
        std::string path;
        std::string body;
        int kind = g.pick(10);
        if (kind < 6) {
          body = g.body(&path).dump();
        } else if (kind == 6 && g.chance(0.05)) {
          // Deeply nested values: must be refused, not recursed into.
          path = g.chance(0.5) ? "/v1/chat/completions" : "/tokenize";
          size_t d = 1000 + (size_t)g.pick(200000);
          body = R"({"messages":[{"role":"assistant","content":"x","tool_calls":)" + std::string(d, '[') +
                 std::string(d, ']') + "}]}";
        } else if (kind < 8) {
          body = g.body(&path).dump();
          body = body.substr(0, (size_t)g.pick((int)body.size() + 1));  // truncated
        } else {
          path = paths[g.pick(12)];
          body = g.bytes(200, g.chance(0.5));
        }
        if (g.chance(0.1)) path = "/" + g.bytes(30, true);
        httplib::Headers h;
        if (g.chance(0.2)) h.emplace("Authorization", g.chance(0.5) ? "Bearer " + g.bytes(10, true) : g.bytes(10, true));
        if (g.chance(0.2)) h.emplace(g.chance(0.5) ? "X-" + std::to_string(g.pick(100)) : "Accept", g.bytes(40, true));
        if (g.chance(0.1)) h.emplace("Origin", "http://" + g.bytes(8, true));
        const char* ctype = g.chance(0.8) ? "application/json" : "text/plain";
        std::string method = g.chance(0.85) ? "POST" : methods[g.pick(6)];
        httplib::Result r(nullptr, httplib::Error::Unknown);
        if (method == "POST") r = c.Post(path.c_str(), h, body, ctype);
        else if (method == "GET") r = c.Get(path.c_str(), h);
        else if (method == "PUT") r = c.Put(path.c_str(), h, body, ctype);
        else if (method == "DELETE") r = c.Delete(path.c_str(), h, body, ctype);
        else if (method == "PATCH") r = c.Patch(path.c_str(), h, body, ctype);
        else r = c.Options(path.c_str(), h);
        if (!r) {
          // The client refuses some paths itself (bad characters); anything else is a failure.
          if (r.error() != httplib::Error::Connection && r.error() != httplib::Error::Read) {
          } else {
            ++no_answer;
          }
        } else if (r->status >= 500 && r->status != 503) {
          ++server_errors;
          UNSCOPED_INFO("5xx for " << method << " " << path << ": " << r->body.substr(0, 300));
        }
        ++done;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(done == kRequests);
  CHECK(server_errors == 0);
  CHECK(no_answer == 0);
  REQUIRE(server->running());
  CHECK(http_get(port, "/health").status == 200);
  auto idle = [&] {
    std::string m = http_get(port, "/metrics").body;
    return metric_value(m, "pagoda_kv_blocks_used") == 0 && metric_value(m, "pagoda_requests_running") == 0 &&
           metric_value(m, "pagoda_requests_waiting") == 0;
  };
  bool drained = false;
  for (int i = 0; i < 500 && !(drained = idle()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(drained);
  // And it still serves real work.
  auto ok = http_post(port, "/v1/completions", json{{"prompt", "still alive"}, {"max_tokens", 4}});
  CHECK(ok.status == 200);
  CHECK(server->stop() == 0);
}
