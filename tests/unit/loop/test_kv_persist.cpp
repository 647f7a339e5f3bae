// The persistent prefix cache end to end on a tiny random-weight model (CPU backend): an engine
// restarted on its --kv-cache-dir serves the same prompt from restored blocks with identical
// greedy output; a file from another model or block size, or a corrupted one, is ignored with
// a log line and changes nothing; the pinned system prompt is restored instead of recomputed;
// and with a host-memory tier, evicted blocks come back by copy (hit counts, identical output).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "engine/loop/engine.h"
#include "engine/gguf/gguf_identity.h"
#include "engine_test_util.h"
#include "tests/support/test_files.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

// The engine's log lines, kept for the checks (the default logger gets a ring buffer).
std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> log_lines() {
  static auto sink = [] {
    auto s = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(512);
    spdlog::default_logger()->sinks().push_back(s);
    return s;
  }();
  return sink;
}

bool logged(const std::string& needle) {
  for (const std::string& line : log_lines()->last_formatted())
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int max_tokens = 12) {
  GenerationRequest r;
  r.prompt = prompt;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

struct Run {
  std::vector<int32_t> tokens;
  int cached = 0;
};

Run run_one(LlmEngine& engine, const std::vector<int32_t>& prompt) {
  RequestResult r = collect(*submit_or_throw(engine, greedy(prompt)));
  return {r.choices.at(0).tokens, r.usage.cached_prompt_tokens};
}

EngineConfig persist_config(const std::string& dir, int kv_blocks = 64, KvTypes kv_types = GgmlType::F16) {
  EngineConfig c = tiny_engine_config(kv_blocks, 512, 16, kv_types);
  c.kv_cache_dir = dir;
  c.model_identity = "tiny-model-1";
  return c;
}

// One engine's life: runs `prompts` in order, then stops (saving, when configured).
std::vector<Run> life(const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                      EngineStats* stats = nullptr) {
  auto model = load_model(tiny_model(), cfg.max_batch_tokens);
  LlmEngine engine(*model, nullptr, cfg);
  std::vector<Run> out;
  for (const auto& p : prompts) out.push_back(run_one(engine, p));
  if (stats) *stats = wait_idle(engine);
  return out;
}

}  // namespace

TEST_CASE("a restarted engine serves a saved prefix from disk with identical greedy output") {
  log_lines();
  const pagoda::testing::ScratchDir scratch("kvpersist-restart");
  const std::string& dir = scratch.str();
  const auto prompt = random_tokens(100, 11);
  EngineStats s1, s2;
  const auto cold = life(persist_config(dir), {prompt}, &s1);
  CHECK(cold[0].cached == 0);
  CHECK(s1.kv_disk_blocks_loaded == 0);
  REQUIRE(std::filesystem::exists(dir + "/prefix-cache.pgkv"));
  CHECK(logged("saved "));

  const auto warm = life(persist_config(dir), {prompt}, &s2);
  CHECK(warm[0].tokens == cold[0].tokens);
  CHECK(warm[0].cached == 96);  // six full blocks of 16; the last prompt token is always computed
  CHECK(s2.kv_disk_blocks_loaded >= 6);
  CHECK(s2.kv_disk_hits == 6);
  CHECK(s2.prefill_tokens_computed == 4);
  CHECK(logged("restored "));

  // The uncached truth: prefix caching off computes everything.
  EngineConfig off = tiny_engine_config(64);
  off.prefix_caching = false;
  CHECK(life(off, {prompt})[0].tokens == cold[0].tokens);

  // A save on request, while running, answers what it wrote.
  auto model = load_model(tiny_model(), 512);
  LlmEngine engine(*model, nullptr, persist_config(dir));
  run_one(engine, random_tokens(40, 12));
  const PrefixCacheSaveResult saved = engine.save_prefix_cache();
  CHECK(saved.ok);
  CHECK(saved.blocks >= 8);  // the restored six (and their chain) plus two new ones
  CHECK(saved.tokens == saved.blocks * 16);
  CHECK(saved.path == dir + "/prefix-cache.pgkv");
  CHECK(engine.stats().kv_disk_saves == 1);
}

TEST_CASE("a file from another model or block size, or a corrupted one, is ignored with a log line") {
  log_lines();
  const pagoda::testing::ScratchDir scratch("kvpersist-refuse");
  const std::string& dir = scratch.str();
  const auto prompt = random_tokens(70, 21);
  const auto cold = life(persist_config(dir), {prompt});
  const std::string file = dir + "/prefix-cache.pgkv";
  REQUIRE(std::filesystem::exists(file));
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> good{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};

  SECTION("another model") {
    EngineConfig c = persist_config(dir);
    c.model_identity = "another-model";
    EngineStats st;
    const auto r = life(c, {prompt}, &st);
    CHECK(st.kv_disk_blocks_loaded == 0);
    CHECK(r[0].cached == 0);
    CHECK(r[0].tokens == cold[0].tokens);
    CHECK(logged("ignoring the prefix cache file"));
    CHECK(logged("another model file"));
  }
  SECTION("another K or V element type") {
    EngineStats st;
    const auto r = life(persist_config(dir, 64, KvTypes(GgmlType::F16, GgmlType::Q8_0)), {prompt}, &st);
    CHECK(st.kv_disk_blocks_loaded == 0);
    CHECK(r[0].cached == 0);
    CHECK(logged("KV element types K f16, V f16 (this server: K f16, V q8_0)"));
  }
  SECTION("another block size") {
    EngineConfig c = persist_config(dir);
    c.block_size = 32;
    EngineStats st;
    const auto r = life(c, {prompt}, &st);
    CHECK(st.kv_disk_blocks_loaded == 0);
    CHECK(r[0].cached == 0);
    CHECK(r[0].tokens == cold[0].tokens);
    CHECK(logged("block size 16 (this server: 32)"));
  }
  SECTION("corrupted K/V bytes") {
    std::vector<char> bad = good;
    bad[bad.size() / 2] ^= 0x10;
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(bad.data(), static_cast<std::streamsize>(bad.size()));
    EngineStats st;
    const auto r = life(persist_config(dir), {prompt}, &st);
    CHECK(st.kv_disk_blocks_loaded == 0);
    CHECK(r[0].cached == 0);
    CHECK(r[0].tokens == cold[0].tokens);
    CHECK(logged("checksum mismatch"));
  }
  SECTION("truncated") {
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(good.data(), static_cast<std::streamsize>(good.size() - 100));
    EngineStats st;
    const auto r = life(persist_config(dir), {prompt}, &st);
    CHECK(st.kv_disk_blocks_loaded == 0);
    CHECK(r[0].tokens == cold[0].tokens);
    CHECK(logged("truncated"));
  }
}

TEST_CASE("the pinned system prompt is restored from disk instead of recomputed") {
  const pagoda::testing::ScratchDir scratch("kvpersist-system");
  const std::string& dir = scratch.str();
  EngineConfig c = persist_config(dir);
  c.system_prompt = random_tokens(50, 31);
  auto prompt = c.system_prompt;
  const auto tail = random_tokens(20, 32);
  prompt.insert(prompt.end(), tail.begin(), tail.end());
  EngineStats s1, s2;
  const auto cold = life(c, {prompt}, &s1);
  const auto warm = life(c, {prompt}, &s2);
  CHECK(warm[0].tokens == cold[0].tokens);
  CHECK(cold[0].cached == 50);  // the pinned prefix, shared as always
  // Warm: the system prompt's three full blocks come from disk, so only its last two tokens
  // are computed; and the request's own fourth block (system tokens 48-49 and 14 of its own,
  // completed and registered in the first life) comes from disk too.
  CHECK(warm[0].cached == 64);
  CHECK(s1.prefill_tokens_computed == 50 + 20);
  CHECK(s2.prefill_tokens_computed == 2 + 6);
}

TEST_CASE("host-memory tier: evicted prefix blocks come back by copy, with identical output") {
  // 12 blocks of 16 tokens: the second request (170 + 11 tokens, all 12 blocks) evicts every
  // block of the first.
  const auto a = random_tokens(64, 41), b = random_tokens(170, 42);
  EngineConfig plain = tiny_engine_config(12);
  EngineConfig tiered = plain;
  tiered.kv_host_memory = 4u << 20;
  EngineStats sp, st;
  const auto without = life(plain, {a, b, a}, &sp);
  const auto with = life(tiered, {a, b, a}, &st);
  CHECK(without[2].cached == 0);  // evicted: recomputed
  CHECK(with[2].cached == 48);    // three full blocks back from host memory
  CHECK(st.kv_host_spilled >= 3);
  CHECK(st.kv_host_restored == 3);
  CHECK(st.kv_host_blocks > 0);
  CHECK(st.kv_host_bytes > 0);
  CHECK(with[0].tokens == without[0].tokens);
  CHECK(with[2].tokens == with[0].tokens);
  CHECK(without[2].tokens == without[0].tokens);
  CHECK(st.prefill_tokens_computed + 48 == sp.prefill_tokens_computed);
  CHECK(st.kv_blocks_used == 0);  // nothing leaked
}

TEST_CASE("mixed K/V types: a restart from disk and the host tier give identical output") {
  // f16 K and q8_0 V: a raw block is per layer K's f16 bytes then V's (smaller) q8_0 bytes.
  const KvTypes kv{GgmlType::F16, GgmlType::Q8_0};
  const pagoda::testing::ScratchDir scratch("kvpersist-mixed");
  const std::string& dir = scratch.str();
  const auto prompt = random_tokens(100, 13);
  EngineStats st;
  const auto cold = life(persist_config(dir, 64, kv), {prompt});
  const auto warm = life(persist_config(dir, 64, kv), {prompt}, &st);
  CHECK(warm[0].cached == 96);
  CHECK(st.kv_disk_hits == 6);
  CHECK(warm[0].tokens == cold[0].tokens);

  const auto a = random_tokens(64, 43), b = random_tokens(170, 44);
  EngineConfig tiered = tiny_engine_config(12, 512, 16, kv);
  tiered.kv_host_memory = 4u << 20;
  const auto with = life(tiered, {a, b, a}, &st);
  CHECK(with[2].cached == 48);  // three full blocks back from host memory
  CHECK(st.kv_host_restored == 3);
  CHECK(with[2].tokens == with[0].tokens);
}

TEST_CASE("the automatic host tier: half the device KV cache, bounded by free host RAM, off on the CPU") {
  const size_t gib = size_t{1} << 30;
  CHECK(auto_host_tier_bytes(true, 8 * gib, 64 * gib) == 4 * gib);  // half the device cache
  CHECK(auto_host_tier_bytes(true, 8 * gib, 8 * gib) == 2 * gib);   // a quarter of free host RAM
  CHECK(auto_host_tier_bytes(true, 8 * gib, 0) == 0);               // free host RAM unknown: off
  CHECK(auto_host_tier_bytes(false, 8 * gib, 64 * gib) == 0);       // the cache is in host RAM
  // An engine on the CPU backend with the automatic setting has no tier: an evicted prefix is
  // recomputed, as with the tier off.
  EngineConfig automatic = tiny_engine_config(12);
  automatic.kv_host_memory_auto = true;
  EngineStats st;
  const auto a = random_tokens(64, 41), b = random_tokens(170, 42);
  const auto runs = life(automatic, {a, b, a}, &st);
  CHECK(runs[2].cached == 0);
  CHECK(st.kv_host_spilled == 0);
  CHECK(st.kv_host_bytes == 0);
}

TEST_CASE("the host tier keeps to its budget, least recently used out first") {
  HostKvTier tier(3 * (64 + 4 * 4 + 96));
  auto rec = [](uint64_t k) {
    KvBlockRecord r;
    r.key = {k, k + 1};
    r.tokens = {1, 2, 3, static_cast<int32_t>(k)};
    r.bytes.assign(64, static_cast<uint8_t>(k));
    return r;
  };
  for (uint64_t k = 1; k <= 4; ++k) tier.put(rec(k));
  CHECK(tier.size() == 3);
  CHECK_FALSE(tier.contains({1, 2}));
  CHECK(tier.bytes() <= tier.max_bytes());
  KvBlockRecord out;
  const int32_t wrong[] = {1, 2, 3, 9};
  CHECK_FALSE(tier.take({3, 4}, wrong, out));  // the tokens must match, not just the key
  const int32_t right[] = {1, 2, 3, 3};
  REQUIRE(tier.take({3, 4}, right, out));
  CHECK(out.bytes == std::vector<uint8_t>(64, 3));
  CHECK(tier.size() == 2);
  KvBlockRecord huge = rec(9);
  huge.bytes.resize(1 << 20);
  tier.put(huge);  // larger than the whole budget: dropped
  CHECK_FALSE(tier.contains({9, 10}));
}

TEST_CASE("a model file's identity follows its metadata and weights") {
  const std::string a = gguf::file_identity(tiny_model());
  CHECK(a == gguf::file_identity(tiny_model()));
  CHECK(a.rfind("0-", 0) == 0);  // read from memory: size 0
  CHECK(a != gguf::file_identity(tiny_model_file(1024, 2)));  // same shapes, other weights
  CHECK(a != gguf::file_identity(tiny_model_file(2048, 1)));  // other metadata
}
