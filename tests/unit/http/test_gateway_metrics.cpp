// The gateway protocol's gauges (vLLM's names, read by the Kubernetes Gateway API Inference
// Extension's endpoint picker) scraped from GET /metrics over loopback while streaming requests
// run and queue in the FakeEngine: each equals the engine's own state (waiting, running, KV use,
// cache layout, adapters) and pagoda's own series for the same quantity.
#include <catch2/catch.hpp>

#include <future>
#include <sstream>
#include <thread>

#include "tests/support/fake_api_server.h"

using namespace pagoda;
using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

// The value of the one series of `name` whose labels contain `labels_part`; NaN when absent.
double sample(const std::string& text, const std::string& name, const std::string& labels_part = "") {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const size_t close = line.rfind("} ");
    if (close == std::string::npos || line.substr(0, close).find(labels_part) == std::string::npos) continue;
    return std::stod(line.substr(close + 2));
  }
  return std::nan("");
}

// Every gateway gauge against `st`, the engine's state at the scrape.
void check_against(const std::string& text, const EngineStats& st) {
  CHECK(sample(text, "vllm:num_requests_waiting") == st.waiting);
  CHECK(sample(text, "vllm:num_requests_running") == st.running);
  const double usage = (double)st.kv_blocks_used / st.kv_blocks_total;
  CHECK(sample(text, "vllm:kv_cache_usage_perc") == Approx(usage).margin(1e-12));
  CHECK(sample(text, "vllm:gpu_cache_usage_perc") == Approx(usage).margin(1e-12));
  // One owner: the same numbers as pagoda's own series.
  CHECK(sample(text, "vllm:num_requests_waiting") == sample(text, "pagoda_requests_waiting"));
  CHECK(sample(text, "vllm:num_requests_running") == sample(text, "pagoda_requests_running"));
  CHECK(sample(text, "vllm:kv_cache_usage_perc") == sample(text, "pagoda_kv_cache_usage_ratio"));
  CHECK(sample(text, "pagoda_kv_blocks_used") == st.kv_blocks_used);
  const std::string layout = "block_size=\"" + std::to_string(st.kv_block_size) + "\",num_gpu_blocks=\"" +
                             std::to_string(st.kv_blocks_total) + "\"";
  CHECK(sample(text, "vllm:cache_config_info", layout) == 1);
  // No adapters are served: none allowed, none running, none waiting.
  CHECK(sample(text, "vllm:lora_requests_info",
               "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"") > 0);
}

}  // namespace

TEST_CASE("gateway gauges follow the engine under concurrent streaming load", "[server]") {
  FakeApiServer::Config c;
  c.engine.max_running = 3;
  c.engine.block_size = 16;
  c.engine.blocks_total = 64;
  c.engine.step_time = std::chrono::milliseconds(20);
  FakeApiServer s(c);

  const int kRequests = 7;
  std::vector<std::future<HttpResult>> answers;
  for (int i = 0; i < kRequests; ++i) {
    // Prompts of different lengths, so the sequences hold different numbers of KV blocks.
    json req = {{"prompt", std::string(5 + 13 * i, 'a' + i)}, {"max_tokens", 40}, {"temperature", 0},
                {"stream", true}};
    answers.push_back(std::async(std::launch::async, [&s, req] { return s.post("/v1/completions", req); }));
  }
  // Until three run and four wait (bounded: 10 s); a request takes 40 steps (0.8 s) to finish.
  EngineStats st;
  for (int i = 0; i < 1000; ++i) {
    st = s.engine.stats();
    if (st.running == 3 && st.waiting == kRequests - 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(st.running == 3);
  REQUIRE(st.waiting == kRequests - 3);
  s.engine.pause(true);  // hold the state still across the scrape
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a step under way when paused ends
  st = s.engine.stats();
  const HttpResult scraped = s.get("/metrics");
  REQUIRE(scraped.status == 200);
  const EngineStats after = s.engine.stats();
  REQUIRE(after.running == st.running);
  REQUIRE(after.waiting == st.waiting);
  REQUIRE(after.kv_blocks_used == st.kv_blocks_used);
  CHECK(st.kv_blocks_used >= 3);  // every running sequence holds a block at least
  check_against(scraped.body, st);
  s.engine.pause(false);

  for (auto& a : answers) {
    const HttpResult r = a.get();
    CHECK(r.status == 200);
    CHECK(sse_events(r.body).back() == "[DONE]");
  }
  // Drained: nothing waits or runs, no block is held.
  for (int i = 0; i < 500 && s.engine.stats().running; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  st = s.engine.stats();
  REQUIRE(st.running == 0);
  const HttpResult idle = s.get("/metrics");
  check_against(idle.body, st);
  CHECK(sample(idle.body, "vllm:kv_cache_usage_perc") == 0);
}
