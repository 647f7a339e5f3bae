// KvCacheManager: per-sequence block tables over one BlockPool (docs/architecture.md).
//
// It owns the bookkeeping only; the cache contents live in the backend. Whatever has to happen
// to the contents (block copies for copy-on-write, K re-roping for context shift) is queued as
// plain edits that the scheduler moves into the next StepPlan, where the backend applies them
// (copies first, then shifts) before the forward pass writes anything.
//
// Rules that keep the cache correct:
// - Copy-on-write: before a sequence writes into a block that another sequence (or the pinned
//   system prompt) also references, it gets a fresh copy of that block. This one rule covers the
//   partial block of a shared prefix, n > 1 siblings and context shift of shared blocks.
// - Only full, computed blocks of sequences that never shifted are registered in the prefix
//   cache (commit()), so a hit always holds exactly the KV a fresh prefill would produce.
// - Freed blocks keep their registration and stay reusable until evicted (BlockPool's LRU).
// - Sliding window (set_window, kv_cache_window.cpp): when every layer attends only to the last
//   W positions, blocks behind every query's window are released and leave a hole (kHole) in
//   the table, which attention never reads; registered blocks stay in the prefix cache.
// - With a host tier (set_host_tier), an evicted registered block is first copied to host
//   memory, and a prompt that needs it again gets it back by copy into a fresh block
//   (restore_block), which is then registered as if it had been computed.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_pool.h"
#include "engine/kv/host_kv_tier.h"
#include "engine/backend/step_plan.h"

namespace pagoda {

class KvCacheManager {
 public:
  KvCacheManager(int num_blocks, int block_size, BlockPool::HashFn hash = BlockPool::default_hash);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int block_size() const { return pool_.block_size(); }

  // With prefix caching off, match_prefix() shares only the pinned prefix (for comparisons).
  void set_prefix_caching(bool on) { prefix_caching_ = on; }

  bool has(uint64_t seq) const { return seqs_.count(seq) != 0; }
  // The sequence's block table (throws std::out_of_range for an unknown sequence).
  const std::vector<int32_t>& block_table(uint64_t seq) const;

  // Starts `seq` (which must be new) by sharing the longest cached prefix of tokens[0, max_tokens):
  // registered full blocks (ref+1 each, no copies) and, when the prompt extends the pinned
  // prefix, the pinned prefix's partial last block (copied on first write). Returns how many
  // tokens are now in the cache for it (0 when nothing matched).
  // `salt` keys the KV's provenance beyond the tokens (a LoRA adapter's content key; 0: the base
  // model): blocks are shared only between sequences of the same salt, the sequence's own
  // blocks are registered under it (commit), and the pinned prefix is shared with salt 0 only.
  int match_prefix(uint64_t seq, const std::vector<int32_t>& tokens, int max_tokens, uint64_t salt = 0);

  // Blocks `seq` needs to write the tokens [num_computed, num_computed + n): blocks not yet in its
  // table plus copies of shared blocks it would write into. Unknown sequences start empty.
  int blocks_needed(uint64_t seq, int num_computed, int n) const;
  // Makes room for those tokens (queuing copy-on-write copies). Returns false, changing nothing,
  // when the pool cannot supply blocks_needed() blocks.
  bool allocate(uint64_t seq, int num_computed, int n);

  // After a forward pass: registers the sequence's newly completed full blocks (num_computed
  // tokens of `tokens` are in the cache) in the prefix cache.
  void commit(uint64_t seq, const std::vector<int32_t>& tokens, int num_computed);

  // Releases every block of `seq` (last block first, so a prefix's head is evicted last).
  void free(uint64_t seq);

  // `child` (new) shares the blocks of `parent` that hold its first num_tokens tokens.
  void fork(uint64_t parent, uint64_t child, int num_tokens);

  // Context shift: keeps tokens [0, n_keep), drops [n_keep, n_keep + n_discard) and queues a
  // K re-rope by -n_discard for every later block (copying shared ones first). Both counts must
  // be whole blocks and num_computed > n_keep + n_discard. Returns false, changing nothing, when
  // the arguments do not allow it or the copies of shared blocks cannot be had.
  bool shift(uint64_t seq, int num_computed, int n_keep, int n_discard);

  // Marks `seq` (fully computed over `tokens`) as the pinned prefix (the system prompt): its
  // blocks are never freed, and new sequences starting with `tokens` share its partial block.
  void pin(uint64_t seq, const std::vector<int32_t>& tokens);
  int pinned_tokens() const { return static_cast<int>(pinned_tokens_.size()); }
  int pinned_blocks() const;

  // ---- sliding window (kv_cache_window.cpp) ----
  // A released block's table entry: its positions lie behind the window; nothing reads it.
  static constexpr int32_t kHole = -1;
  // Every layer of the model attends only to the last `window` positions (0: some layer sees
  // everything; nothing is released).
  void set_window(int window) { window_ = window > 0 ? window : 0; }
  int window() const { return window_; }
  // Releases the blocks of `seq` that no query at position >= num_computed can read (all their
  // positions are below num_computed - window + 1), except those holding the first
  // `keep_tokens` tokens (a context shift keeps them and may bring them back into the window).
  // Returns how many table entries became holes.
  int release_behind_window(uint64_t seq, int num_computed, int keep_tokens);
  // Blocks `seq` holds (its table without the holes).
  int blocks_held(uint64_t seq) const;

  // Moves the queued cache edits out (into a StepPlan).
  void take_edits(std::vector<BlockCopy>& copies, std::vector<KShift>& shifts);
  // Speculative decoding (kv_cache_tree.cpp): after verifying a token tree whose node j was
  // written at logical index n_past + j, keeps the accepted path (`path`: node ids, root first,
  // node at depth d moving to logical index n_past + d: a queued slot copy unless it is there
  // already) and releases the blocks past the path's end. The sequence then holds
  // n_past + path.size() computed tokens.
  void keep_tree_path(uint64_t seq, int n_past, const std::vector<int>& path);
  // Moves the queued slot copies out (StepPlan::slot_copies, applied in this order).
  void take_slot_copies(std::vector<SlotCopy>& copies);

  // ---- the host tier and the disk file (kv_persist.h) ----
  // A block's raw bytes on the backend (Backend::read_kv_block_raw / write_kv_block_raw).
  struct RawBlockIo {
    size_t bytes = 0;
    std::function<void(int block, void* out)> read;
    std::function<void(int block, const void* in)> write;
  };
  void set_raw_io(RawBlockIo io) { io_ = std::move(io); }
  const RawBlockIo& raw_io() const { return io_; }
  // Evicted registered blocks are copied to `tier` (not owned; null: off) and come back from it.
  void set_host_tier(HostKvTier* tier);
  // Writes `bytes` into a fresh block and registers it as the block of `tokens` after
  // `parent_block` (kNoBlock: a first block), whose key is `parent` (the roots' for a first
  // block). When that prefix is registered already, that block is used instead. Returns the
  // block with one reference the caller must release, or kNoBlock when no block can be had.
  int restore_block(const PrefixKey& parent, int parent_block, const int32_t* tokens, const void* bytes);
  void release_block(int block) { pool_.release(block); }
  // Marks a block restored from the disk file: its first prefix hit counts as a disk hit.
  void mark_from_disk(int block) { from_disk_[block] = pool_.generation(block); }
  // Registered blocks, most recently used first: those held by sequences, then the cached
  // ones from the most recently released.
  std::vector<int> registered_blocks_mru() const;
  struct TierCounters {
    uint64_t spilled = 0;    // blocks copied to the host tier on eviction
    uint64_t restored = 0;   // blocks copied back from it for a prompt
    uint64_t disk_hits = 0;  // prefix hits on blocks restored from the disk file
  };
  const TierCounters& tier_counters() const { return counters_; }

 private:
  struct SeqKv {
    std::vector<int32_t> table;
    std::vector<uint64_t> hashes;  // chained hash of each registered leading block
    std::vector<uint64_t> ids;     // ... and its second hash (PrefixKey::id), as many
    PrefixKey root = BlockPool::root_key(0);  // what its first block chains from (match_prefix's salt)
    bool cacheable = true;         // false after a context shift
    int holes_upto = 0;            // release_behind_window() scanned the table up to here
  };
  void spill(int block);  // the pool's evict hook
  // A block for a copy-on-write destination (never fails after a capacity check).
  int claim_fresh();
  bool is_pinned_block(int block) const;
  SeqKv& get(uint64_t seq);
  const SeqKv& get(uint64_t seq) const;

  BlockPool pool_;
  std::unordered_map<uint64_t, SeqKv> seqs_;
  std::vector<BlockCopy> copies_;
  std::vector<KShift> shifts_;
  std::vector<SlotCopy> slot_copies_;
  bool prefix_caching_ = true;
  int window_ = 0;
  bool has_pinned_ = false;
  uint64_t pinned_seq_ = 0;
  std::vector<int32_t> pinned_tokens_;
  RawBlockIo io_;
  HostKvTier* tier_ = nullptr;
  std::unordered_map<int, uint64_t> from_disk_;  // block -> generation it was restored in
  TierCounters counters_;
};

}  // namespace pagoda
