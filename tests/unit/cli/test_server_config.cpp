// `pagoda serve` settings: config file + flags (flags win), validation, the shipped configs.
#include <catch2/catch.hpp>
#include <fstream>

#include "server/cli/server_config.h"

using namespace pagoda::server;

namespace {
ServerConfig parse(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_server_config((int)argv.size(), argv.data(), nullptr);
}
}  // namespace

TEST_CASE("flags override the config file", "[config]") {
  std::string path = "/tmp/pagoda_cfg_test_" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << R"({"port": 9000, "max_seqs": 3, "context_shift": false, "api_key": "k",
                           "kv_cache_memory": "64MiB", "timeout": 2.5})";
  ServerConfig c = parse({"--config", path, "--port", "9001"});
  CHECK(c.port == 9001);
  CHECK(c.max_seqs == 3);
  CHECK(!c.context_shift);
  CHECK(c.api_key == "k");
  CHECK(c.kv_cache_bytes() == 64ll << 20);
  CHECK(c.timeout == 2.5);
  CHECK(c.gpu_memory_fraction == 0.9);
  CHECK(parse({"--gpu-memory-fraction", "0.5"}).gpu_memory_fraction == 0.5);
  c = parse({"--port=9002", "--config", path, "--context-shift", "on"});
  CHECK(c.port == 9002);
  CHECK(c.context_shift);
  std::remove(path.c_str());
}

TEST_CASE("bad settings are named", "[config]") {
  CHECK_THROWS_WITH(parse({"--port", "x"}), Catch::Contains("--port"));
  CHECK_THROWS_WITH(parse({"--bogus", "1"}), Catch::Contains("--bogus"));
  CHECK_THROWS_WITH(parse({"--device", "tpu"}), Catch::Contains("cpu|cuda|auto"));
  CHECK_THROWS_WITH(parse({"--kv-cache-memory", "12XB"}), Catch::Contains("kv-cache-memory"));
  CHECK_THROWS_WITH(parse({"--max-seqs"}), Catch::Contains("needs a value"));
  CHECK_THROWS_WITH(parse({"--gpu-memory-fraction", "0"}), Catch::Contains("gpu-memory-fraction"));
  CHECK_THROWS_WITH(parse({"--gpu-memory-fraction", "1.5"}), Catch::Contains("gpu-memory-fraction"));
  ServerConfig c;
  CHECK_THROWS_WITH(apply_config_json(R"({"prot": 1})", "f.json", c), Catch::Contains("prot"));
  CHECK_THROWS_WITH(apply_config_json(R"({"port": "abc"})", "f.json", c), Catch::Contains("port"));
}

TEST_CASE("shipped configs parse", "[config]") {
  for (const char* f : {"configs/default.json", "configs/cpu-small.json", "configs/gpu-8b.json"}) {
    INFO(f);
    std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/" + f);
    REQUIRE(in.good());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ServerConfig c;
    CHECK_NOTHROW(apply_config_json(text, f, c));
  }
}
