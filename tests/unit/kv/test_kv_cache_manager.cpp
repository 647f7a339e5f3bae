// KvCacheManager: block tables, prefix matching, copy-on-write, pinning, context shift, no leaks.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/kv_cache_manager.h"

using pagoda::BlockCopy;
using pagoda::BlockPool;
using pagoda::KShift;
using pagoda::KvCacheManager;

namespace {
std::vector<int32_t> iota(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}
std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
using Table = std::vector<int32_t>;
}  // namespace

TEST_CASE("prefix sharing reuses registered full blocks and LRU keeps them after free") {
  KvCacheManager kv(8, 4);
  auto& pool = kv.pool();
  const auto p1 = iota(10);
  CHECK(kv.match_prefix(1, p1, 9) == 0);
  REQUIRE(kv.allocate(1, 0, 10));
  CHECK(kv.block_table(1) == Table{0, 1, 2});
  kv.commit(1, p1, 10);
  CHECK(pool.is_registered(0));
  CHECK(pool.is_registered(1));
  CHECK_FALSE(pool.is_registered(2));  // partial

  const auto p2 = cat(iota(10), {100, 101});
  CHECK(kv.match_prefix(2, p2, 11) == 8);
  CHECK(kv.block_table(2) == Table{0, 1});
  CHECK(pool.ref_count(0) == 2);
  CHECK(pool.ref_count(1) == 2);
  CHECK(kv.blocks_needed(2, 8, 4) == 1);
  REQUIRE(kv.allocate(2, 8, 4));
  CHECK(kv.block_table(2) == Table{0, 1, 3});
  kv.commit(2, p2, 12);
  CHECK(pool.is_registered(3));

  kv.free(1);
  CHECK(pool.ref_count(0) == 1);
  CHECK(pool.free_list() == std::vector<int>{2, 4, 5, 6, 7});
  kv.free(2);
  // Last block first: 3 then 1 then 0 go to the LRU tail (all registered).
  CHECK(pool.free_list() == std::vector<int>{2, 4, 5, 6, 7, 3, 1, 0});
  CHECK(pool.stats().cached == 3);
  CHECK(pool.stats().used == 0);

  // A third sequence still finds the prefix; no copies were ever needed.
  CHECK(kv.match_prefix(3, p2, 11) == 8);
  CHECK(kv.block_table(3) == Table{0, 1});
  CHECK(pool.free_list() == std::vector<int>{2, 4, 5, 6, 7, 3});
  std::vector<BlockCopy> copies;
  std::vector<KShift> shifts;
  kv.take_edits(copies, shifts);
  CHECK(copies.empty());
  CHECK(shifts.empty());
  kv.free(3);
}

TEST_CASE("a fully cached prompt still leaves its last token to compute") {
  KvCacheManager kv(8, 4);
  const auto p = iota(8);
  kv.match_prefix(1, p, 7);
  REQUIRE(kv.allocate(1, 0, 8));
  kv.commit(1, p, 8);
  CHECK(kv.match_prefix(2, p, 7) == 4);  // block 1 would cover the last token
  CHECK(kv.block_table(2) == Table{0});
  kv.free(1);
  kv.free(2);
}

TEST_CASE("eviction: a fresh block evicts the least recently released prefix block") {
  KvCacheManager kv(4, 2);
  auto& pool = kv.pool();
  const auto a = iota(4, 0);
  const auto b = iota(4, 100);
  kv.match_prefix(1, a, 3);
  REQUIRE(kv.allocate(1, 0, 4));  // blocks 0 1
  kv.commit(1, a, 4);
  kv.match_prefix(2, b, 3);
  REQUIRE(kv.allocate(2, 0, 4));  // blocks 2 3
  kv.commit(2, b, 4);
  kv.free(1);  // tail: 1 0
  kv.free(2);  // tail: 1 0 3 2
  CHECK(pool.free_list() == std::vector<int>{1, 0, 3, 2});
  const auto c = iota(2, 500);
  kv.match_prefix(3, c, 1);
  REQUIRE(kv.allocate(3, 0, 2));
  CHECK(kv.block_table(3) == Table{1});  // evicted a's second block
  CHECK(kv.match_prefix(4, a, 4) == 2);   // a's first block survives
  CHECK(kv.match_prefix(5, b, 4) == 4);
  kv.free(3);
  kv.free(4);
  kv.free(5);
  CHECK(pool.stats().used == 0);
}

TEST_CASE("hash collisions never return a wrong block") {
  KvCacheManager kv(16, 4, [](uint64_t, const int32_t*, int) { return uint64_t{7}; });
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> b = {9, 9, 9, 9, 5, 6, 7, 8, 9};
  const std::vector<int32_t> c = {1, 2, 3, 4, 9, 9, 9, 9, 9};
  kv.match_prefix(1, a, 8);
  REQUIRE(kv.allocate(1, 0, 9));
  kv.commit(1, a, 9);
  CHECK(kv.match_prefix(2, b, 8) == 0);  // same hashes, different first block
  CHECK(kv.match_prefix(3, c, 8) == 4);  // shares only the first block
  CHECK(kv.block_table(3) == Table{kv.block_table(1)[0]});
  REQUIRE(kv.allocate(2, 0, 9));
  kv.commit(2, b, 9);
  // b's second block has a's second block's tokens, but a different parent.
  CHECK(kv.match_prefix(4, a, 8) == 8);
  CHECK(kv.block_table(4) == Table{kv.block_table(1)[0], kv.block_table(1)[1]});
  for (uint64_t s = 1; s <= 4; ++s) kv.free(s);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("fork shares blocks; the first writer of the shared partial block copies it") {
  KvCacheManager kv(8, 4);
  auto& pool = kv.pool();
  const auto p = iota(6);
  kv.match_prefix(1, p, 5);
  REQUIRE(kv.allocate(1, 0, 6));  // 0 1
  kv.commit(1, p, 6);
  kv.fork(1, 2, 6);
  kv.fork(1, 3, 6);
  CHECK(kv.block_table(2) == Table{0, 1});
  CHECK(pool.ref_count(1) == 3);
  CHECK(kv.blocks_needed(1, 6, 1) == 1);
  REQUIRE(kv.allocate(1, 6, 1));
  REQUIRE(kv.allocate(2, 6, 1));
  CHECK(kv.blocks_needed(3, 6, 1) == 0);  // last owner writes in place
  REQUIRE(kv.allocate(3, 6, 1));
  CHECK(kv.block_table(1) == Table{0, 2});
  CHECK(kv.block_table(2) == Table{0, 3});
  CHECK(kv.block_table(3) == Table{0, 1});
  std::vector<BlockCopy> copies;
  std::vector<KShift> shifts;
  kv.take_edits(copies, shifts);
  REQUIRE(copies.size() == 2);
  CHECK(copies[0].src == 1);
  CHECK(copies[0].dst == 2);
  CHECK(copies[1].src == 1);
  CHECK(copies[1].dst == 3);
  CHECK(pool.ref_count(0) == 3);
  CHECK(pool.ref_count(1) == 1);
  for (uint64_t s = 1; s <= 3; ++s) kv.free(s);
  CHECK(pool.stats().used == 0);
}

TEST_CASE("the pinned prefix shares its partial block by copy-on-write and is never freed") {
  KvCacheManager kv(8, 4);
  auto& pool = kv.pool();
  const auto sys = iota(6, 1000);
  kv.match_prefix(100, sys, 6);
  REQUIRE(kv.allocate(100, 0, 6));  // 0 1
  kv.commit(100, sys, 6);
  kv.pin(100, sys);
  CHECK(kv.pinned_tokens() == 6);
  CHECK(kv.pinned_blocks() == 2);
  CHECK_THROWS(kv.free(100));

  const auto p = cat(sys, {1, 2, 3});
  CHECK(kv.match_prefix(1, p, 8) == 6);
  CHECK(kv.block_table(1) == Table{0, 1});
  CHECK(pool.ref_count(1) == 2);
  REQUIRE(kv.allocate(1, 6, 3));
  CHECK(kv.block_table(1) == Table{0, 2, 3});
  std::vector<BlockCopy> copies;
  std::vector<KShift> shifts;
  kv.take_edits(copies, shifts);
  REQUIRE(copies.size() == 1);
  CHECK(copies[0].src == 1);
  CHECK(copies[0].dst == 2);

  // Exactly the system prompt: everything but its last token is shared.
  CHECK(kv.match_prefix(2, sys, 5) == 5);
  // A prompt that diverges inside the partial block gets only the full blocks.
  auto q = sys;
  q[5] = 7;
  q.push_back(8);
  CHECK(kv.match_prefix(3, q, 6) == 4);
  for (uint64_t s = 1; s <= 3; ++s) kv.free(s);
  CHECK(pool.stats().used == 2);
}

TEST_CASE("context shift drops whole blocks, re-ropes later ones and copies shared ones first") {
  KvCacheManager kv(16, 4);
  auto& pool = kv.pool();
  const auto p = iota(22);
  kv.match_prefix(1, p, 21);
  REQUIRE(kv.allocate(1, 0, 22));  // 0..5
  kv.commit(1, p, 22);
  kv.fork(1, 2, 22);  // all six shared
  std::vector<BlockCopy> copies;
  std::vector<KShift> shifts;

  CHECK_FALSE(kv.shift(1, 22, 2, 8));  // n_keep not a whole block
  CHECK_FALSE(kv.shift(1, 22, 4, 20)); // nothing would remain
  REQUIRE(kv.shift(1, 22, 4, 8));
  kv.take_edits(copies, shifts);
  // Blocks 1 and 2 dropped (still held by seq 2); 3, 4, 5 are shared: copied, then shifted.
  CHECK(kv.block_table(1) == Table{0, 6, 7, 8});
  REQUIRE(copies.size() == 3);
  CHECK(copies[0].src == 3);
  CHECK(copies[0].dst == 6);
  CHECK(copies[2].src == 5);
  CHECK(copies[2].dst == 8);
  REQUIRE(shifts.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(shifts[i].block == 6 + i);
    CHECK(shifts[i].delta == -8);
  }
  CHECK(kv.block_table(2) == Table{0, 1, 2, 3, 4, 5});  // untouched
  CHECK(pool.ref_count(3) == 1);
  CHECK(pool.is_registered(3));  // the other sequence's blocks keep their prefix

  // Unshared: shifted in place, unregistered, and nothing further is cached for it.
  kv.free(2);
  copies.clear();
  shifts.clear();
  REQUIRE(kv.shift(1, 14, 4, 4));
  kv.take_edits(copies, shifts);
  CHECK(copies.empty());
  CHECK(kv.block_table(1) == Table{0, 7, 8});
  REQUIRE(shifts.size() == 2);
  CHECK(shifts[0].block == 7);
  CHECK(shifts[0].delta == -4);
  CHECK_FALSE(pool.is_registered(7));
  kv.commit(1, iota(12), 12);
  CHECK_FALSE(pool.is_registered(8));
  kv.free(1);
  CHECK(pool.stats().used == 0);
}

TEST_CASE("no block leaks after random mixes of allocate, share, fork, shift and free") {
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    KvCacheManager kv(64, 4);
    std::vector<std::pair<uint64_t, int>> live;  // seq, num_computed
    uint64_t next = 1;
    for (int op = 0; op < 400; ++op) {
      const int kind = rng() % 5;
      if (kind == 0 || live.empty()) {
        // New sequence from one of a few prompt families (so prefixes overlap).
        auto p = iota(4 + rng() % 30, (rng() % 3) * 1000);
        const uint64_t id = next++;
        const int m = kv.match_prefix(id, p, static_cast<int>(p.size()) - 1);
        if (kv.allocate(id, m, static_cast<int>(p.size()) - m)) {
          kv.commit(id, p, static_cast<int>(p.size()));
          live.push_back({id, static_cast<int>(p.size())});
        } else {
          kv.free(id);
        }
      } else if (kind == 1) {
        auto& [id, n] = live[rng() % live.size()];
        const int k = 1 + rng() % 6;
        if (kv.allocate(id, n, k)) n += k;
      } else if (kind == 2) {
        const auto [id, n] = live[rng() % live.size()];
        const uint64_t child = next++;
        kv.fork(id, child, n);
        live.push_back({child, n});
      } else if (kind == 3) {
        auto& [id, n] = live[rng() % live.size()];
        if (n > 12 && kv.shift(id, n, 4, 4)) n -= 4;
      } else {
        const size_t i = rng() % live.size();
        kv.free(live[i].first);
        live.erase(live.begin() + i);
      }
      std::vector<BlockCopy> c;
      std::vector<KShift> s;
      kv.take_edits(c, s);
    }
    for (const auto& [id, n] : live) kv.free(id);
    const auto st = kv.pool().stats();
    CHECK(st.used == 0);
    CHECK(st.free + st.cached == 64);
    CHECK(kv.pool().num_available() == 64);
  }
}

TEST_CASE("blocks computed under one salt (a LoRA adapter) never serve another, even on colliding hashes") {
  // The default hash, and a constant one (every key collides): the root check alone must hold.
  for (const bool collide : {false, true}) {
    INFO("colliding hashes: " << collide);
    KvCacheManager kv = collide ? KvCacheManager(16, 4, [](uint64_t, const int32_t*, int) { return uint64_t{7}; })
                                : KvCacheManager(16, 4);
    const auto p = iota(10);
    const uint64_t adapter_a = 0xA11CE, adapter_b = 0xB0B;
    CHECK(kv.match_prefix(1, p, 9, adapter_a) == 0);
    REQUIRE(kv.allocate(1, 0, 10));
    kv.commit(1, p, 10);
    kv.free(1);
    CHECK(kv.match_prefix(2, p, 9, 0) == 0);          // the base model: nothing
    kv.free(2);
    CHECK(kv.match_prefix(3, p, 9, adapter_b) == 0);  // another adapter: nothing
    kv.free(3);
    CHECK(kv.match_prefix(4, p, 9, adapter_a) == 8);  // the same adapter: both full blocks
    // A fork keeps the salt: what the child registers chains from the adapter's root.
    kv.fork(4, 5, 8);
    REQUIRE(kv.allocate(5, 8, 4));
    const auto q = cat(iota(8), {50, 51, 52, 53});
    kv.commit(5, q, 12);
    kv.free(4);
    kv.free(5);
    CHECK(kv.match_prefix(6, q, 12, adapter_a) == 12);
    kv.free(6);
    CHECK(kv.match_prefix(7, q, 12, 0) == 0);
    kv.free(7);
  }
}

TEST_CASE("the pinned prefix's partial block is shared with the base model only") {
  KvCacheManager kv(8, 4);
  const auto sys = iota(6);
  kv.match_prefix(1, sys, 6);
  REQUIRE(kv.allocate(1, 0, 6));
  kv.commit(1, sys, 6);
  kv.pin(1, sys);
  const auto prompt = cat(sys, {40, 41, 42});
  CHECK(kv.match_prefix(2, prompt, 8, 0) == 6);
  CHECK(kv.match_prefix(3, prompt, 8, 0x5A17) == 0);
}
