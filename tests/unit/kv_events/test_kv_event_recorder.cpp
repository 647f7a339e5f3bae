// KvEventRecorder as a BlockPool's observer: a registration becomes a BlockStored event whose
// hash chains from its parent's, an eviction a BlockRemoved, and a batch carries them in order
// in vLLM's array layout. (The e2e test decodes the stream with Python's msgpack.)
#include <catch2/catch.hpp>

#include "engine/kv/block_pool.h"
#include "engine/kv_events/block_hash.h"
#include "engine/kv_events/kv_event_recorder.h"

using namespace pagoda;
using namespace pagoda::kv_events;

namespace {
const std::vector<int32_t> kFirst = {1, 2, 3, 4}, kSecond = {5, 6, 7, 8};
}

TEST_CASE("registrations and evictions become events with chained hashes") {
  BlockPool pool(3, 4);
  KvEventRecorder rec(4, BlockPool::root_key(0).hash);
  pool.set_observer(&rec);
  const int a = pool.allocate(), b = pool.allocate();
  pool.register_block(a, pool.hash(BlockPool::kRootHash, kFirst.data()), BlockPool::kNoBlock, kFirst.data());
  pool.register_block(b, pool.hash(pool.key(a).hash, kSecond.data()), a, kSecond.data());
  const uint64_t ha = block_hash(root_block_hash(""), kFirst.data(), 4);
  REQUIRE(rec.hash_of(a) == ha);
  REQUIRE(rec.hash_of(b) == block_hash(ha, kSecond.data(), 4));
  CHECK(rec.pending_events() == 2);

  // Released, they stay cached (no event); taken for new data, they are removed.
  pool.release(b);
  pool.release(a);
  CHECK(rec.pending_events() == 2);
  pool.allocate();  // the never-registered block first
  CHECK(rec.pending_events() == 2);
  const int evicted = pool.allocate();
  CHECK(rec.pending_events() == 3);
  CHECK_FALSE(rec.hash_of(evicted).has_value());
  CHECK(rec.hash_of(evicted == a ? b : a).has_value());

  const std::string batch = rec.take_batch(1.5);
  CHECK_FALSE(rec.pending());
  // [ts, [3 events]]: fixarray 2, float64 1.5, fixarray 3, then ["BlockStored", [hash], nil, ...
  CHECK(batch.substr(0, 11) == std::string("\x92\xcb\x3f\xf8\0\0\0\0\0\0\x93", 11));
  CHECK(batch.substr(11, 13) == "\x97\xab" "BlockStored");
  CHECK(batch.find("BlockRemoved") != std::string::npos);
}

TEST_CASE("an adapter's blocks chain its root key into every hash; a clear forgets all") {
  BlockPool pool(2, 4);
  KvEventRecorder rec(4, BlockPool::root_key(0).hash, "seed");
  pool.set_observer(&rec);
  const PrefixKey root = BlockPool::root_key(77);
  const int a = pool.allocate(), b = pool.allocate();
  pool.register_block(a, 1, BlockPool::kNoBlock, kFirst.data(), 0, root);
  pool.register_block(b, 2, a, kSecond.data());
  const uint64_t ha = block_hash(root_block_hash("seed"), kFirst.data(), 4, root.hash);
  CHECK(rec.hash_of(a) == ha);
  CHECK(rec.hash_of(b) == block_hash(ha, kSecond.data(), 4, root.hash));
  CHECK(ha != block_hash(root_block_hash("seed"), kFirst.data(), 4));
  rec.all_cleared();
  CHECK_FALSE(rec.hash_of(a).has_value());
  CHECK(rec.take_batch(0).find("AllBlocksCleared") != std::string::npos);
}
