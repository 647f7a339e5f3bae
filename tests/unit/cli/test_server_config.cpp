// `pagoda serve` settings: config file + flags (flags win), validation, the shipped configs.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

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
  CHECK_FALSE(c.cuda_batch_invariant);
  CHECK(parse({"--cuda-batch-invariant", "on"}).cuda_batch_invariant);
  CHECK_FALSE(parse({"--cuda-batch-invariant", "off"}).cuda_batch_invariant);
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
  CHECK_THROWS_WITH(parse({"--speculative", "medusa"}), Catch::Contains("none|ngram|draft"));
  CHECK_THROWS_WITH(parse({"--spec-tokens", "0"}), Catch::Contains("--spec-tokens"));
  CHECK_THROWS_WITH(parse({"--spec-tree", "9"}), Catch::Contains("--spec-tree"));
  CHECK_THROWS_WITH(parse({"--speculative", "draft"}), Catch::Contains("--draft-model"));
  CHECK(parse({"--speculative", "draft", "--draft-model", "d.gguf", "--spec-tokens", "6"}).spec_tokens == 6);
  ServerConfig c;
  CHECK_THROWS_WITH(apply_config_json(R"({"prot": 1})", "f.json", c), Catch::Contains("prot"));
  CHECK_THROWS_WITH(apply_config_json(R"({"port": "abc"})", "f.json", c), Catch::Contains("port"));
}

TEST_CASE("K and V cache types: --kv-cache-type sets both, the per-half options override it", "[config]") {
  ServerConfig d = parse({});
  CHECK(d.kv_type_k_name() == "f16");
  CHECK(d.kv_type_v_name() == "f16");
  ServerConfig c = parse({"--kv-cache-type", "q8_0"});
  CHECK(c.kv_type_k_name() == "q8_0");
  CHECK(c.kv_type_v_name() == "q8_0");
  // The per-half option wins wherever it stands on the line.
  c = parse({"--kv-cache-type-k", "f16", "--kv-cache-type", "q8_0"});
  CHECK(c.kv_type_k_name() == "f16");
  CHECK(c.kv_type_v_name() == "q8_0");
  c = parse({"--kv-cache-type-v=q8_0"});
  CHECK(c.kv_type_k_name() == "f16");
  CHECK(c.kv_type_v_name() == "q8_0");
  c = parse({"-ctk", "f32", "--cache-type-v", "q8_0"});  // llama-server's spellings
  CHECK(c.kv_type_k_name() == "f32");
  CHECK(c.kv_type_v_name() == "q8_0");
  // Config-file keys, and flags over them.
  std::string path = "/tmp/pagoda_cfg_kvtypes_" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << R"({"kv_cache_type": "f32", "kv_cache_type_v": "q8_0"})";
  c = parse({"--config", path});
  CHECK(c.kv_type_k_name() == "f32");
  CHECK(c.kv_type_v_name() == "q8_0");
  c = parse({"--config", path, "--kv-cache-type-k", "q8_0", "--kv-cache-type-v", "f16"});
  CHECK(c.kv_type_k_name() == "q8_0");
  CHECK(c.kv_type_v_name() == "f16");
  std::ofstream(path) << R"({"kv_cache_type_k": "q4_0"})";
  CHECK_THROWS_WITH(parse({"--config", path}), Catch::Contains("kv_cache_type_k") && Catch::Contains("q4_0"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(parse({"--kv-cache-type-k", "q4_0"}),
                    Catch::Contains("--kv-cache-type-k") && Catch::Contains("f16|f32|q8_0") && Catch::Contains("'q4_0'"));
  CHECK_THROWS_WITH(parse({"--kv-cache-type-v", "F16"}), Catch::Contains("--kv-cache-type-v"));
  CHECK_THROWS_WITH(parse({"-ctv", ""}), Catch::Contains("-ctv"));
  CHECK_THROWS_WITH(parse({"--kv-cache-type-v"}), Catch::Contains("needs a value"));
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

TEST_CASE("vLLM and llama-server spellings set the same options", "[config]") {
  ServerConfig c = parse({"models/x.gguf", "-c", "4096", "-np", "8", "-t", "3", "--max-num-batched-tokens", "1024",
                          "--gpu-memory-utilization", "0.8"});
  CHECK(c.model == "models/x.gguf");
  CHECK(c.ctx_size == 4096);
  CHECK(c.max_seqs == 8);
  CHECK(c.threads == 3);
  CHECK(c.max_batch_tokens == 1024);
  CHECK(c.gpu_memory_fraction == 0.8);
  c = parse({"-m", "a.gguf", "--max-model-len=2048", "--max-num-seqs", "5"});
  CHECK(c.model == "a.gguf");
  CHECK(c.ctx_size == 2048);
  CHECK(c.max_seqs == 5);
  CHECK(parse({"--parallel", "4"}).max_seqs == 4);
  CHECK(parse({"--pooling", "last"}).pooling == "last");
  CHECK_THROWS_WITH(parse({"--pooling", "max"}), Catch::Contains("mean|cls|last"));
  CHECK_THROWS_WITH(parse({"a.gguf", "b.gguf"}), Catch::Contains("b.gguf"));
  CHECK_THROWS_WITH(parse({"-x", "1"}), Catch::Contains("-x"));
  // --help names the aliases, and says where llama-server's flag of the same name differs.
  const std::string help = server_usage();
  CHECK(help.find("also: -c, --max-model-len") != std::string::npos);
  CHECK(help.find("llama-server's -c/--ctx-size is the total over its slots") != std::string::npos);
  CHECK(help.find("also: --max-num-seqs, --parallel, -np") != std::string::npos);
}

TEST_CASE("the README's configuration table has every flag --help lists, with its aliases", "[config]") {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/README.md");
  REQUIRE(in.good());
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t table = readme.find("| flag | default | meaning |");
  REQUIRE(table != std::string::npos);
  const std::string rows = readme.substr(table, readme.find("\n\n", table) - table);
  std::istringstream help(server_usage());
  int flags = 0;
  for (std::string line; std::getline(help, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first.rfind("--", 0) == 0) {
      ++flags;
      INFO(first);
      CHECK(rows.find("`" + first + "`") != std::string::npos);
    } else if (first == "also:") {
      // "also: -c, --max-model-len; a note": the aliases before the ';'.
      std::string names = line.substr(line.find("also: ") + 6);
      names = names.substr(0, names.find(';'));
      std::istringstream list(names);
      for (std::string alias; std::getline(list, alias, ',');) {
        alias.erase(0, alias.find_first_not_of(' '));
        INFO(alias);
        CHECK(rows.find("`" + alias + "`") != std::string::npos);
      }
    }
  }
  CHECK(flags > 25);
}

TEST_CASE("every flag the README's configuration table names is one --help lists", "[config]") {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/README.md");
  REQUIRE(in.good());
  // Every flag and alias --help names: "--x" first on a line, and the names after "also: ".
  std::set<std::string> known;
  std::istringstream help(server_usage());
  for (std::string line; std::getline(help, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first.rfind("--", 0) == 0) known.insert(first);
    if (first != "also:") continue;
    std::string names = line.substr(line.find("also: ") + 6);
    std::istringstream list(names.substr(0, names.find(';')));
    for (std::string alias; std::getline(list, alias, ',');) known.insert(alias.substr(alias.find_first_not_of(' ')));
  }
  // The table's rows: the `-...` names in each row's first cell.
  bool in_table = false;
  int named = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| flag | default | meaning |", 0) == 0) in_table = true;
    if (!in_table) continue;
    if (line.empty()) break;
    const size_t end = line.find('|', 1);
    const std::string cell = line.substr(1, end == std::string::npos ? std::string::npos : end - 1);
    for (size_t at = cell.find("`-"); at != std::string::npos; at = cell.find("`-", at + 1)) {
      const size_t close = cell.find('`', at + 1);
      const std::string flag = cell.substr(at + 1, close - at - 1);
      INFO(flag);
      CHECK(known.count(flag) == 1);
      ++named;
      at = close;
    }
  }
  CHECK(named > 25);
}

TEST_CASE("the shipped examples have the formats the README describes", "[config]") {
  const std::string dir = std::string(PAGODA_SOURCE_DIR) + "/examples/";
  std::ifstream m(dir + "messages.json");
  REQUIRE(m.good());
  const nlohmann::json messages = nlohmann::json::parse(m);
  REQUIRE(messages.is_array());
  for (const auto& msg : messages) {
    CHECK(msg["role"].is_string());
    CHECK(msg["content"].is_string());
  }
  std::ifstream p(dir + "prompts.jsonl");
  REQUIRE(p.good());
  int lines = 0;
  for (std::string line; std::getline(p, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    CHECK((j["prompt"].is_string() || j["messages"].is_array()));
    ++lines;
  }
  CHECK(lines >= 2);
}

TEST_CASE("the persistent prefix cache's settings take sizes", "[config]") {
  ServerConfig d = parse({});
  CHECK(d.kv_cache_dir.empty());
  CHECK(d.kv_cache_dir_bytes() == 4ll << 30);
  CHECK(d.kv_host_bytes() == -1);  // auto: the engine sizes it (on CUDA; off on the CPU)
  CHECK(parse({"--kv-host-memory", "off"}).kv_host_bytes() == 0);
  ServerConfig c = parse({"--kv-cache-dir", "/tmp/kv", "--kv-cache-dir-size", "1.5GiB", "--kv-host-memory", "512MiB"});
  CHECK(c.kv_cache_dir == "/tmp/kv");
  CHECK(c.kv_cache_dir_bytes() == (3ll << 30) / 2);
  CHECK(c.kv_host_bytes() == 512ll << 20);
  std::string why;
  try {
    parse({"--kv-host-memory", "lots"});
  } catch (const ConfigError& e) {
    why = e.what();
  }
  CHECK(why.find("--kv-host-memory") != std::string::npos);
  apply_config_json(R"({"kv_cache_dir_size": 1048576})", "test", c);
  CHECK(c.kv_cache_dir_bytes() == 1 << 20);
}

TEST_CASE("LoRA options: --lora is repeatable NAME=PATH, in flags and config lists", "[config]") {
  ServerConfig c = parse({"--lora", "a=/x/a.gguf", "--lora=b=/x/b=c.gguf", "--max-lora-rank", "16"});
  const auto ads = c.lora_adapters();
  REQUIRE(ads.size() == 2);
  CHECK(ads[0] == std::make_pair(std::string("a"), std::string("/x/a.gguf")));
  CHECK(ads[1] == std::make_pair(std::string("b"), std::string("/x/b=c.gguf")));
  CHECK(c.max_lora_rank == 16);
  CHECK(c.engine_max_loras() == 4);
  CHECK(parse({}).engine_max_loras() == 0);  // no adapters, no runtime loading: no slots
  CHECK(parse({"--allow-runtime-lora", "on", "--max-loras", "2"}).engine_max_loras() == 2);
  CHECK_THROWS_WITH(parse({"--lora", "noequals"}), Catch::Contains("NAME=PATH"));
  CHECK_THROWS_WITH(parse({"--lora", "=p"}), Catch::Contains("NAME=PATH"));
  CHECK_THROWS_WITH(parse({"--lora", "a=p", "--lora", "a=q"}), Catch::Contains("twice"));
  CHECK_THROWS_WITH(parse({"--lora", "a=p", "--lora", "b=q", "--max-loras", "1"}), Catch::Contains("--max-loras"));
  CHECK_THROWS_WITH(parse({"--max-lora-rank", "0"}), Catch::Contains("--max-lora-rank"));
  ServerConfig j;
  apply_config_json(R"({"lora": ["a=1.gguf", "b=2.gguf"], "allow_runtime_lora": true})", "f.json", j);
  CHECK(j.lora.size() == 2);
  CHECK(j.allow_runtime_lora);
  apply_config_json(R"({"lora": "c=3.gguf"})", "f.json", j);
  CHECK(j.lora.size() == 3);
  CHECK_THROWS_WITH(apply_config_json(R"({"lora": 3})", "f.json", j), Catch::Contains("lora"));
}
