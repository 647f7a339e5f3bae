// End to end: the persistent prefix cache (--kv-cache-dir) of the real `pagoda serve` binary on
// loopback. A prompt served cold, the server stopped (SIGTERM: saved) and started again on the
// same folder: the same prompt comes back with cached_tokens from the restored blocks and the
// identical greedy output; POST /v1/cache/save sits behind the API key and reports what it
// wrote; a file from another block size or a corrupted one is ignored with a log line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/e2e/e2e_fixture.h"

using namespace pagoda::testing;
using json = nlohmann::json;

namespace {

const std::string kKey = "persist-secret";

json completion(const std::string& prompt) {
  return {{"model", "model"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
}

// A prompt of a few hundred tokens (the model's context is 512).
std::string long_prompt() {
  std::string p = "Notes from the harbour master's log, kept in order:";
  for (int i = 0; i < 30; ++i) p += " Ship " + std::to_string(i * 7 + 3) + " docked at pier " + std::to_string(i % 5) + ".";
  return p;
}

struct Answer {
  std::string text;
  int cached = -1;
  int prompt_tokens = 0;
};

Answer ask(int port, const std::string& prompt) {
  const HttpResult r = http_post(port, "/v1/completions", completion(prompt), kKey);
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json j = r.j();
  return {j["choices"][0]["text"].get<std::string>(), j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
          j["usage"]["prompt_tokens"].get<int>()};
}

std::vector<std::string> flags(const std::string& dir, std::vector<std::string> more = {}) {
  std::vector<std::string> f = {"--kv-cache-dir", dir, "--api-key", kKey};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

double metric(int port, const std::string& name) { return metric_value(http_get(port, "/metrics", kKey).body, name); }

}  // namespace

TEST_CASE("e2e: the prefix cache outlives a restart; the save route is admin-only", "[e2e]") {
  const std::string dir = e2e_dir() + "/kv-cache";
  const std::string file = dir + "/prefix-cache.pgkv";
  const std::string prompt = long_prompt();

  Answer cold;
  {
    auto s = start_server(flags(dir));
    cold = ask(s->port(), prompt);
    CHECK(cold.cached == 0);
    REQUIRE(cold.prompt_tokens > 200);
    // The admin route: behind the key, and answers what it wrote.
    CHECK(http_post(s->port(), "/v1/cache/save", json::object()).status == 401);
    const HttpResult saved = http_post(s->port(), "/v1/cache/save", json::object(), kKey);
    INFO(saved.body);
    REQUIRE(saved.status == 200);
    CHECK(saved.j()["object"] == "kv_cache.save");
    CHECK(saved.j()["blocks"].get<int>() >= cold.prompt_tokens / 16);
    CHECK(saved.j()["path"] == file);
    CHECK(metric(s->port(), "pagoda_kv_disk_saves_total") == 1);
    CHECK(s->stop() == 0);  // a clean stop saves again
    CHECK(s->log().find("saved ") != std::string::npos);
  }
  REQUIRE(std::filesystem::exists(file));

  {
    auto s = start_server(flags(dir));
    const Answer warm = ask(s->port(), prompt);
    CHECK(warm.text == cold.text);
    CHECK(warm.cached >= cold.prompt_tokens - 16);
    CHECK(metric(s->port(), "pagoda_kv_disk_loaded_blocks_total") >= cold.prompt_tokens / 16);
    CHECK(metric(s->port(), "pagoda_kv_disk_hit_blocks_total") >= cold.prompt_tokens / 16 - 1);
    CHECK(s->stop() == 0);
    CHECK(s->log().find("restored ") != std::string::npos);
  }

  {
    // A corrupted file is ignored with a log line (and replaced by a good one at the stop).
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) / 2));
    f.put('\x5a');
    f.put('\xa5');
    f.close();
    auto s = start_server(flags(dir));
    const Answer again = ask(s->port(), prompt);
    CHECK(again.cached == 0);
    CHECK(again.text == cold.text);
    CHECK(s->stop() == 0);
    CHECK(s->log().find("ignoring the prefix cache file") != std::string::npos);
  }
  {
    // A file from another block size is ignored with a log line.
    auto s = start_server(flags(dir, {"--block-size", "32"}));
    const Answer other = ask(s->port(), prompt);
    CHECK(other.cached == 0);
    CHECK(other.text == cold.text);
    CHECK(s->stop() == 0);
    const std::string log = s->log();
    CHECK(log.find("ignoring the prefix cache file") != std::string::npos);
    CHECK(log.find("block size 16 (this server: 32)") != std::string::npos);
  }
}

TEST_CASE("e2e: without --kv-cache-dir the save route says so", "[e2e]") {
  const HttpResult r = http_post(shared_server().port(), "/v1/cache/save", json::object());
  INFO(r.body);
  CHECK(r.status == 400);
  CHECK(r.j()["error"]["code"] == "kv_cache_dir_not_set");
}
