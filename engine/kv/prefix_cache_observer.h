// PrefixCacheObserver: what the prefix cache tells an outside reader (the KV event publisher)
// about its contents, and nothing about how it keeps them. BlockPool calls it on the engine
// thread as a full block is registered (it becomes reusable) and as a registration is dropped
// (eviction, or the block being repurposed). Between the two calls the block's identity holds:
// the block id names the same cached prefix.
#pragma once

#include <cstdint>

namespace pagoda {

class PrefixCacheObserver {
 public:
  virtual ~PrefixCacheObserver() = default;
  // `block` now caches `n` tokens computed after `parent_block` (-1: the sequence's first
  // block, chained from the root whose hash is `root_hash`, which matters only then; a LoRA
  // adapter has its own root).
  // A parent is itself registered when its child is (the child was committed after it).
  virtual void block_stored(int block, int parent_block, uint64_t root_hash, const int32_t* tokens, int n) = 0;
  // `block` no longer caches anything.
  virtual void block_removed(int block) = 0;
};

}  // namespace pagoda
