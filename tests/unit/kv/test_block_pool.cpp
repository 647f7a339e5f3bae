// BlockPool: exact block ids, ref counts, free-list (LRU) order and prefix-hash lookups.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/kv/block_pool.h"

using pagoda::BlockPool;

namespace {
const std::vector<int32_t> kA = {1, 2, 3, 4};
const std::vector<int32_t> kB = {5, 6, 7, 8};
const std::vector<int32_t> kC = {9, 10, 11, 12};
uint64_t constant_hash(uint64_t, const int32_t*, int) { return 42; }
}  // namespace

TEST_CASE("allocation hands out blocks in order and reports exhaustion") {
  BlockPool pool(4, 4);
  CHECK(pool.num_available() == 4);
  CHECK(pool.allocate() == 0);
  CHECK(pool.allocate() == 1);
  CHECK(pool.allocate() == 2);
  CHECK(pool.allocate() == 3);
  CHECK(pool.allocate() == BlockPool::kNoBlock);
  CHECK(pool.num_available() == 0);
  CHECK(pool.stats().used == 4);
  CHECK(pool.ref_count(2) == 1);
  pool.retain(2);
  CHECK(pool.ref_count(2) == 2);
  pool.release(2);
  CHECK(pool.ref_count(2) == 1);
  CHECK(pool.num_available() == 0);
  CHECK_THROWS(pool.retain(7));
}

TEST_CASE("released blocks: uncached to the head, cached to the tail in LRU order") {
  BlockPool pool(4, 4);
  for (int i = 0; i < 4; ++i) REQUIRE(pool.allocate() == i);
  const uint64_t h0 = pool.hash(BlockPool::kRootHash, kA.data());
  const uint64_t h1 = pool.hash(h0, kB.data());
  const uint64_t h2 = pool.hash(h1, kC.data());
  pool.register_block(0, h0, BlockPool::kNoBlock, kA.data());
  pool.register_block(1, h1, 0, kB.data());
  pool.register_block(2, h2, 1, kC.data());

  pool.release(2);
  pool.release(0);
  pool.release(3);  // holds nothing: goes first
  pool.release(1);
  CHECK(pool.free_list() == std::vector<int>{3, 2, 0, 1});
  auto st = pool.stats();
  CHECK(st.used == 0);
  CHECK(st.cached == 3);
  CHECK(st.free == 1);

  // Hits take blocks off the free list.
  CHECK(pool.find(h0, BlockPool::kNoBlock, kA.data()) == 0);
  pool.retain(0);
  CHECK(pool.free_list() == std::vector<int>{3, 2, 1});
  CHECK(pool.stats().cached == 2);

  // Allocation: the empty block first, then eviction from the LRU head.
  CHECK(pool.allocate() == 3);
  CHECK(pool.allocate() == 2);
  CHECK_FALSE(pool.is_registered(2));
  CHECK(pool.find(h2, 1, kC.data()) == BlockPool::kNoBlock);
  CHECK(pool.find(h1, 0, kB.data()) == 1);  // still cached
  CHECK(pool.allocate() == 1);
  CHECK(pool.find(h1, 0, kB.data()) == BlockPool::kNoBlock);
  CHECK(pool.allocate() == BlockPool::kNoBlock);
  st = pool.stats();
  CHECK(st.used == 4);
  CHECK(st.cached == 0);

  // Release of a cached block after use puts it back at the tail.
  pool.release(1);
  pool.release(0);
  CHECK(pool.free_list() == std::vector<int>{1, 0});
  CHECK(pool.stats().cached == 1);
  CHECK(pool.stats().free == 1);
}

TEST_CASE("a hit checks tokens and parent identity, not just the hash") {
  BlockPool pool(8, 4, constant_hash);  // every block collides
  const int a = pool.allocate();
  const int b = pool.allocate();
  const int c = pool.allocate();
  pool.register_block(a, 42, BlockPool::kNoBlock, kA.data());
  pool.register_block(b, 42, BlockPool::kNoBlock, kB.data());
  pool.register_block(c, 42, a, kA.data());  // "A A"

  CHECK(pool.find(42, BlockPool::kNoBlock, kA.data()) == a);
  CHECK(pool.find(42, BlockPool::kNoBlock, kB.data()) == b);
  CHECK(pool.find(42, BlockPool::kNoBlock, kC.data()) == BlockPool::kNoBlock);
  CHECK(pool.find(42, a, kA.data()) == c);
  CHECK(pool.find(42, b, kA.data()) == BlockPool::kNoBlock);  // "B A" was never computed

  // Once `a` is repurposed, the block computed after it is no longer reachable through it.
  pool.release(a);
  pool.release(b);
  CHECK(pool.free_list().front() == 3);
  for (int i = 0; i < 5; ++i) pool.allocate();  // blocks 3..7
  CHECK(pool.allocate() == a);                  // evicts a (least recently released)
  pool.register_block(a, 42, BlockPool::kNoBlock, kA.data());
  CHECK(pool.find(42, BlockPool::kNoBlock, kA.data()) == a);
  CHECK(pool.find(42, a, kA.data()) == BlockPool::kNoBlock);  // c was computed after the old a
}

TEST_CASE("unregister frees the key and moves a free block to the head") {
  BlockPool pool(3, 2);
  const std::vector<int32_t> t = {7, 8};
  const int x = pool.allocate();
  const int y = pool.allocate();
  const uint64_t h = pool.hash(BlockPool::kRootHash, t.data());
  pool.register_block(x, h, BlockPool::kNoBlock, t.data());
  pool.release(y);
  pool.release(x);
  CHECK(pool.free_list() == std::vector<int>{y, 2, x});
  const uint64_t gen = pool.generation(x);
  pool.unregister(x);
  CHECK(pool.generation(x) != gen);
  CHECK(pool.free_list() == std::vector<int>{x, y, 2});
  CHECK(pool.find(h, BlockPool::kNoBlock, t.data()) == BlockPool::kNoBlock);
  CHECK(pool.stats().cached == 0);
  CHECK_THROWS(pool.release(x));  // not referenced
}
