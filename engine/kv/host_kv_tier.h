// HostKvTier: a bounded host-memory store of evicted prefix-cache blocks (README, "Persistent
// prefix cache"). When the block pool evicts a registered block, its raw K/V bytes are copied
// here; when a later prompt needs that prefix and the pool no longer has it, the bytes are
// copied back into a fresh block instead of recomputing the tokens. On a GPU that turns a
// prefill into a PCIe copy; the logic itself is backend-agnostic (tests run it on the CPU).
//
// Entries are keyed by PrefixKey (two independent chained hashes of the whole prefix) and carry
// their tokens, which every lookup compares. Least recently used entries go first when the
// byte budget is exceeded; an entry restored to the pool leaves the tier (the pool holds it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"

namespace pagoda {

struct KvBlockRecord {
  PrefixKey key;
  PrefixKey parent;              // the block before it in its prefix (the roots' for a first block)
  std::vector<int32_t> tokens;   // block_size of them
  std::vector<uint8_t> bytes;    // Backend::read_kv_block_raw's bytes
  size_t footprint() const { return bytes.size() + tokens.size() * sizeof(int32_t) + 96; }
};

// The tier's size for --kv-host-memory auto: half the device KV cache (device_kv_bytes), at
// most a quarter of the host memory free now; 0 (off) when the KV cache is in host memory
// already (kv_on_device false: the CPU backend, where a tier would only duplicate the pool).
size_t auto_host_tier_bytes(bool kv_on_device, size_t device_kv_bytes, size_t host_free_bytes);

class HostKvTier {
 public:
  explicit HostKvTier(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Adds (or refreshes) an entry as the most recently used; evicts the least recently used
  // until the budget holds. An entry larger than the whole budget is dropped.
  void put(KvBlockRecord rec);
  // Removes and returns the entry for `key` whose tokens equal `tokens` (block_size of them);
  // false when there is none.
  bool take(const PrefixKey& key, const int32_t* tokens, KvBlockRecord& out);
  bool contains(const PrefixKey& key) const { return index_.count(key) != 0; }

  size_t bytes() const { return bytes_; }
  size_t size() const { return lru_.size(); }
  size_t max_bytes() const { return max_bytes_; }
  // Entries, most recently used first (for saving them to disk).
  std::vector<const KvBlockRecord*> entries() const;

 private:
  struct KeyHash {
    size_t operator()(const PrefixKey& k) const { return static_cast<size_t>(k.hash ^ (k.id * 0x9e3779b97f4a7c15ull)); }
  };
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::list<KvBlockRecord> lru_;  // front: most recently used
  std::unordered_map<PrefixKey, std::list<KvBlockRecord>::iterator, KeyHash> index_;
};

}  // namespace pagoda
