// KvEventRecorder: the prefix cache's observer that turns its registrations into vLLM's KV
// cache events (BlockStored, BlockRemoved, AllBlocksCleared) and packs the pending ones into
// one msgpack batch, the payload llm-d's KV-cache indexer reads (docs/kv-events.md):
//   batch        = [ts (float64, unix seconds), [event, ...]]
//   BlockStored  = ["BlockStored", [hash], parent hash or nil, [token ids], block_size,
//                   lora_id (nil), medium (nil)]
//   BlockRemoved = ["BlockRemoved", [hash], medium (nil)]
//   AllBlocksCleared = ["AllBlocksCleared"]
// One event per block. Hashes are block_hash.h's, computed when a block is stored and
// remembered by block id until it is removed. Engine thread only.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/prefix_cache_observer.h"

namespace pagoda::kv_events {

class KvEventRecorder : public PrefixCacheObserver {
 public:
  // `base_root`: the root hash the cache gives base-model first blocks (BlockPool::root_key(0));
  // any other root is an adapter's. `seed`: the indexer's hash seed.
  KvEventRecorder(int block_size, uint64_t base_root, const std::string& seed = "");

  void block_stored(int block, int parent_block, uint64_t root_hash, const int32_t* tokens, int n) override;
  void block_removed(int block) override;
  // The cache starts (or is) empty: an AllBlocksCleared event, and every remembered block goes.
  void all_cleared();

  bool pending() const { return !events_.empty(); }
  size_t pending_events() const { return events_.size(); }
  // The pending events as one batch stamped `ts`; nothing is pending afterwards.
  std::string take_batch(double ts);
  // The event hash of a block the cache holds now (nullopt when it caches nothing).
  std::optional<uint64_t> hash_of(int block) const;

 private:
  struct Stored {
    uint64_t hash;
    uint64_t extra;  // 0: base model; else the adapter's root, chained into every block
  };
  int block_size_;
  uint64_t base_root_;
  uint64_t root_;
  std::unordered_map<int, Stored> blocks_;
  std::vector<std::string> events_;  // each one msgpack-encoded
};

}  // namespace pagoda::kv_events
