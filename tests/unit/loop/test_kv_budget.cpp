// kv_budget: the one KV-cache sizing policy (explicit bytes, device memory, host memory), and
// the block arithmetic it shares with the scheduler (block_math.h). No model needed.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "engine/kv/block_math.h"
#include "engine/loop/engine.h"
#include "engine/loop/kv_budget.h"

using namespace pagoda;

namespace {
constexpr size_t kMiB = size_t{1} << 20;
}

TEST_CASE("kv_budget: explicit bytes win over any memory") {
  EngineConfig cfg;
  cfg.kv_cache_memory = 10 * kMiB;
  const MemoryInfo device{1 * kMiB, 80 * kMiB, true};
  CHECK(kv_budget(cfg, device, kMiB, 4096).blocks == 10);
  const MemoryInfo host{1000 * kMiB, 2000 * kMiB, false};
  CHECK(kv_budget(cfg, host, kMiB, 4096).blocks == 10);
}

TEST_CASE("kv_budget: device memory keeps the process within the fraction") {
  EngineConfig cfg;
  cfg.device_memory_fraction = 0.5;
  // 100 MiB device, 30 in use: the cache may take 50 - 30 = 20, uncapped by max_seqs.
  const MemoryInfo m{70 * kMiB, 100 * kMiB, true};
  CHECK(kv_budget(cfg, m, kMiB, 16).blocks == 20);
  cfg.device_memory_fraction = 0.25;  // already over the share: nothing
  CHECK(kv_budget(cfg, m, kMiB, 16).blocks == 0);
  cfg.device_memory_fraction = 1.5;
  CHECK_THROWS_AS(kv_budget(cfg, m, kMiB, 16), std::invalid_argument);
}

TEST_CASE("kv_budget: host memory is a fraction of what is available, capped at what is usable") {
  EngineConfig cfg;
  cfg.kv_cache_fraction = 0.5;
  cfg.max_seqs = 2;
  cfg.block_size = 16;
  const MemoryInfo m{100 * kMiB, 200 * kMiB, false};
  CHECK(kv_budget(cfg, m, kMiB, 1 << 20).blocks == 50);
  // 2 sequences x 64 tokens = 4 blocks each, twice over: 16 blocks, plus the system prompt's 2.
  cfg.system_prompt.assign(20, 1);
  CHECK(kv_budget(cfg, m, kMiB, 64).blocks == 2 * 2 * 4 + 2);
}

TEST_CASE("context_shift_cut keeps whole blocks and drops half the rest, in whole blocks") {
  CHECK(context_shift_cut(100, 20, 16).n_keep == 32);
  CHECK(context_shift_cut(100, 20, 16).n_discard == 32);  // (100 - 32) / 2 = 34 -> 32
  CHECK(context_shift_cut(100, 0, 16).n_keep == 0);
  CHECK(context_shift_cut(100, -1, 16).n_discard == 48);
  CHECK(context_shift_cut(10, 20, 16).n_keep == 10);  // never more than there is
  CHECK(context_shift_cut(10, 20, 16).n_discard == 0);
  CHECK(ceil_div(33, 16) == 3);
  CHECK(ceil_div(32, 16) == 2);
  CHECK(ceil_div(0, 16) == 0);
}

TEST_CASE("kv_bytes_for_sequences: whole blocks per sequence plus one, times the sequences") {
  CHECK(kv_bytes_for_sequences(1, 32, 16, kMiB) == 3 * kMiB);  // 2 blocks + 1
  CHECK(kv_bytes_for_sequences(1, 33, 16, kMiB) == 4 * kMiB);  // 3 blocks + 1
  CHECK(kv_bytes_for_sequences(4, 1, 16, 100) == 4 * 2 * 100);
  // The engine's explicit-bytes budget gives back exactly those blocks.
  EngineConfig cfg;
  cfg.kv_cache_memory = kv_bytes_for_sequences(3, 100, cfg.block_size, kMiB);
  CHECK(kv_budget(cfg, MemoryInfo{kMiB, kMiB, false}, kMiB, 100).blocks == 3 * (7 + 1));
}
