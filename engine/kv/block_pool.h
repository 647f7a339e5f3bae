// BlockPool: the physical KV blocks of the unified paged cache (docs/architecture.md).
//
// Every block has a reference count (the sequences whose block table holds it). Blocks with no
// reference sit on one intrusive doubly-linked free list, which is also the LRU order of
// eviction: allocation always takes the head. Blocks that hold no reusable data go to the head
// (they are taken first), blocks that hold a registered full prefix go to the tail (least
// recently released = evicted first). Every operation is O(1) except hash-bucket scans.
//
// Prefix cache: a full block is registered under a chained hash of (parent hash, its tokens).
// A lookup never trusts the hash alone: it compares the block's stored tokens and checks that
// the block was computed after exactly the block the caller matched for the previous position
// (parent block id + that block's generation). The generation of a block changes whenever its
// contents are repurposed, so by induction a hit means the whole prefix is identical, even when
// hashes collide (tests inject a constant hash function to prove it).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "engine/kv/prefix_cache_observer.h"

namespace pagoda {

// A registered block's identity beyond the pool's own bookkeeping (the host-memory tier and the
// disk file, where block ids mean nothing): its chained hash and a second, independent chained
// hash of the same prefix (prefix_id_hash), so a block matched by both and by its own tokens is
// the same prefix with odds of a wrong match around 2^-128.
struct PrefixKey {
  uint64_t hash = 0;
  uint64_t id = 0;
  bool operator==(const PrefixKey& o) const { return hash == o.hash && id == o.id; }
};

struct BlockPoolStats {
  int total = 0;
  int used = 0;    // ref count > 0
  int cached = 0;  // ref count 0, holding a registered prefix block (reusable until evicted)
  int free = 0;    // ref count 0, holding nothing reusable
};

class BlockPool {
 public:
  // hash(parent_hash, tokens, n) -> hash of a full block. Injectable so tests can force collisions.
  using HashFn = std::function<uint64_t(uint64_t parent_hash, const int32_t* tokens, int n)>;
  static constexpr uint64_t kRootHash = 0x9e3779b97f4a7c15ull;  // "parent" of a sequence's first block
  static constexpr int kNoBlock = -1;

  // The default chained hash (64-bit mixing of the parent hash and each token).
  static uint64_t default_hash(uint64_t parent_hash, const int32_t* tokens, int n);
  // The second chained hash of PrefixKey (other constants, never injected), rooted at kRootPrefixId.
  static constexpr uint64_t kRootPrefixId = 0x243f6a8885a308d3ull;
  static uint64_t prefix_id_hash(uint64_t parent_id, const int32_t* tokens, int n);
  // The key a sequence's first block chains from: the roots' for the base model (salt 0);
  // for a sequence computed under a LoRA adapter, a key derived from the adapter's content
  // (LoraAdapter::content_key), so its blocks never match another adapter's or the base's.
  static PrefixKey root_key(uint64_t salt);
  // Called by allocate() when the block it takes still holds a registered prefix, before the
  // registration is dropped (key(), parent_key() and tokens() still answer): the host tier
  // copies the block out there.
  using EvictHook = std::function<void(int block)>;
  void set_evict_hook(EvictHook hook) { evict_hook_ = std::move(hook); }
  // Told of every registration and every dropped one (not owned; null: none). Set before the
  // first registration, or the observer misses the blocks already cached.
  void set_observer(PrefixCacheObserver* observer) { observer_ = observer; }

  // `num_blocks` blocks of `block_size` tokens; throws std::invalid_argument on bad sizes.
  BlockPool(int num_blocks, int block_size, HashFn hash = default_hash);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int block_size() const { return block_size_; }
  // Blocks that allocate() can hand out now (free + cached).
  int num_available() const { return num_available_; }

  // Takes the head of the free list (evicting its cached prefix, if any), sets its ref count to
  // 1 and bumps its generation. Returns kNoBlock when every block is in use.
  int allocate();
  // +1 reference; a block with no references leaves the free list (a prefix-cache hit).
  void retain(int block);
  // -1 reference; at zero the block goes to the free list (tail if registered, else head).
  void release(int block);
  int ref_count(int block) const { return blocks_.at(block).ref; }
  // Changes whenever the block's contents are repurposed (allocated fresh or unregistered).
  uint64_t generation(int block) const { return blocks_.at(block).gen; }

  uint64_t hash(uint64_t parent_hash, const int32_t* tokens) const {
    return hash_(parent_hash, tokens, block_size_);
  }
  // The registered block whose key is `hash`, whose tokens equal `tokens` (block_size of them)
  // and which was computed after `parent_block` in its current generation (kNoBlock for a
  // sequence's first block, which must also have been registered under the root `root`).
  // kNoBlock when there is none. Does not take a reference.
  int find(uint64_t hash, int parent_block, const int32_t* tokens, const PrefixKey& root = root_key(0)) const;
  // Registers a full, computed block so later sequences can reuse it. `parent_block` is the
  // block before it in the owner's table (kNoBlock for the first). A block registers once.
  // `prefix_id`: the second hash of PrefixKey (0 when the caller keeps none).
  // `root`: the key a first block chains from (root_key); ignored for other blocks.
  void register_block(int block, uint64_t hash, int parent_block, const int32_t* tokens, uint64_t prefix_id = 0,
                      const PrefixKey& root = root_key(0));
  // A registered block's key, its parent's key as registered (the roots' for a first block) and
  // its tokens.
  PrefixKey key(int block) const { return {blocks_.at(block).hash, blocks_.at(block).prefix_id}; }
  PrefixKey parent_key(int block) const { return blocks_.at(block).parent_key; }
  const std::vector<int32_t>& tokens(int block) const { return blocks_.at(block).tokens; }
  // Drops the block's registration (its contents are about to change) and bumps its generation.
  void unregister(int block);
  bool is_registered(int block) const { return blocks_.at(block).registered; }

  BlockPoolStats stats() const;
  // The most blocks referenced at once since construction or the last reset_peak_used().
  int peak_used() const { return peak_used_; }
  void reset_peak_used() { peak_used_ = num_blocks() - num_available_; }
  // Free-list order, head first (for tests and debugging).
  std::vector<int> free_list() const;

 private:
  struct Block {
    int ref = 0;
    int prev = kNoBlock;  // free-list links, valid while ref == 0
    int next = kNoBlock;
    bool registered = false;
    uint64_t hash = 0;
    uint64_t gen = 0;
    int parent = kNoBlock;
    uint64_t parent_gen = 0;
    std::vector<int32_t> tokens;  // the block's tokens while registered (the hit check)
    uint64_t prefix_id = 0;
    PrefixKey parent_key;
  };

  void list_push_front(int b);
  void list_push_back(int b);
  void list_remove(int b);
  void check(int block) const;

  int block_size_;
  HashFn hash_;
  std::vector<Block> blocks_;
  int head_ = kNoBlock;
  int tail_ = kNoBlock;
  int num_available_ = 0;
  int num_registered_free_ = 0;
  int peak_used_ = 0;
  std::unordered_multimap<uint64_t, int> by_hash_;
  EvictHook evict_hook_;
  PrefixCacheObserver* observer_ = nullptr;
};

}  // namespace pagoda
