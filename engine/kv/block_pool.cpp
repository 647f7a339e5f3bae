#include "engine/kv/block_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pagoda {

namespace {
// splitmix64 finaliser: a cheap, well-mixed 64-bit permutation.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t BlockPool::default_hash(uint64_t parent_hash, const int32_t* tokens, int n) {
  uint64_t h = mix(parent_hash);
  for (int i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return h;
}

uint64_t BlockPool::prefix_id_hash(uint64_t parent_id, const int32_t* tokens, int n) {
  // A different walk from default_hash (multiply-rotate, other odd constants), so the two
  // 64-bit chains collide independently.
  uint64_t h = parent_id ^ 0x6a09e667f3bcc909ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]) * 0xc2b2ae3d27d4eb4full;
    h = ((h << 31) | (h >> 33)) * 0x9fb21c651e98df25ull;
  }
  return mix(h ^ static_cast<uint64_t>(n));
}

PrefixKey BlockPool::root_key(uint64_t salt) {
  if (salt == 0) return {kRootHash, kRootPrefixId};
  return {mix(kRootHash ^ mix(salt)), mix(kRootPrefixId ^ (salt * 0xc2b2ae3d27d4eb4full))};
}

BlockPool::BlockPool(int num_blocks, int block_size, HashFn hash)
    : block_size_(block_size), hash_(std::move(hash)) {
  if (num_blocks <= 0) throw std::invalid_argument("BlockPool: num_blocks must be positive");
  if (block_size <= 0) throw std::invalid_argument("BlockPool: block_size must be positive");
  if (!hash_) throw std::invalid_argument("BlockPool: no hash function");
  blocks_.resize(num_blocks);
  for (int b = 0; b < num_blocks; ++b) list_push_back(b);
  num_available_ = num_blocks;
}

void BlockPool::check(int block) const {
  if (block < 0 || block >= num_blocks())
    throw std::out_of_range("BlockPool: block " + std::to_string(block) + " out of range");
}

void BlockPool::list_push_front(int b) {
  Block& blk = blocks_[b];
  blk.prev = kNoBlock;
  blk.next = head_;
  if (head_ != kNoBlock) blocks_[head_].prev = b; else tail_ = b;
  head_ = b;
}

void BlockPool::list_push_back(int b) {
  Block& blk = blocks_[b];
  blk.next = kNoBlock;
  blk.prev = tail_;
  if (tail_ != kNoBlock) blocks_[tail_].next = b; else head_ = b;
  tail_ = b;
}

void BlockPool::list_remove(int b) {
  Block& blk = blocks_[b];
  if (blk.prev != kNoBlock) blocks_[blk.prev].next = blk.next; else head_ = blk.next;
  if (blk.next != kNoBlock) blocks_[blk.next].prev = blk.prev; else tail_ = blk.prev;
  blk.prev = blk.next = kNoBlock;
}

int BlockPool::allocate() {
  if (head_ == kNoBlock) return kNoBlock;
  const int b = head_;
  list_remove(b);
  --num_available_;
  peak_used_ = std::max(peak_used_, num_blocks() - num_available_);
  Block& blk = blocks_[b];
  blk.ref = 1;
  if (blk.registered) {
    --num_registered_free_;
    if (evict_hook_) evict_hook_(b);
    unregister(b);  // evicts the cached prefix block; bumps the generation
  } else {
    ++blk.gen;
  }
  return b;
}

void BlockPool::retain(int block) {
  check(block);
  Block& blk = blocks_[block];
  if (blk.ref == 0) {
    list_remove(block);
    --num_available_;
    peak_used_ = std::max(peak_used_, num_blocks() - num_available_);
    if (blk.registered) --num_registered_free_;
  }
  ++blk.ref;
}

void BlockPool::release(int block) {
  check(block);
  Block& blk = blocks_[block];
  if (blk.ref <= 0)
    throw std::logic_error("BlockPool: release of unreferenced block " + std::to_string(block));
  if (--blk.ref > 0) return;
  ++num_available_;
  if (blk.registered) {
    ++num_registered_free_;
    list_push_back(block);   // keeps its prefix; evicted in LRU order
  } else {
    list_push_front(block);  // nothing worth keeping: reuse it first
  }
}

int BlockPool::find(uint64_t hash, int parent_block, const int32_t* tokens, const PrefixKey& root) const {
  const uint64_t parent_gen = parent_block == kNoBlock ? 0 : blocks_.at(parent_block).gen;
  auto [it, end] = by_hash_.equal_range(hash);
  for (; it != end; ++it) {
    const Block& blk = blocks_[it->second];
    if (blk.parent != parent_block || blk.parent_gen != parent_gen) continue;
    if (parent_block == kNoBlock && !(blk.parent_key == root)) continue;
    if (!std::equal(blk.tokens.begin(), blk.tokens.end(), tokens)) continue;
    return it->second;
  }
  return kNoBlock;
}

void BlockPool::register_block(int block, uint64_t hash, int parent_block, const int32_t* tokens,
                               uint64_t prefix_id, const PrefixKey& root) {
  check(block);
  Block& blk = blocks_[block];
  if (blk.registered) return;
  blk.registered = true;
  blk.hash = hash;
  blk.prefix_id = prefix_id;
  blk.parent_key = parent_block == kNoBlock ? root : key(parent_block);
  blk.parent = parent_block;
  blk.parent_gen = parent_block == kNoBlock ? 0 : blocks_.at(parent_block).gen;
  blk.tokens.assign(tokens, tokens + block_size_);
  if (blk.ref == 0) ++num_registered_free_;
  by_hash_.emplace(hash, block);
  if (observer_) observer_->block_stored(block, parent_block, blk.parent_key.hash, blk.tokens.data(), block_size_);
}

void BlockPool::unregister(int block) {
  check(block);
  Block& blk = blocks_[block];
  ++blk.gen;
  if (!blk.registered) return;
  if (observer_) observer_->block_removed(block);
  auto [it, end] = by_hash_.equal_range(blk.hash);
  for (; it != end; ++it) {
    if (it->second == block) {
      by_hash_.erase(it);
      break;
    }
  }
  blk.registered = false;
  blk.tokens.clear();
  blk.tokens.shrink_to_fit();
  if (blk.ref == 0) {
    // Stays available, but now holds nothing: move it to the head.
    --num_registered_free_;
    list_remove(block);
    list_push_front(block);
  }
}

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s;
  s.total = num_blocks();
  s.used = s.total - num_available_;
  s.cached = num_registered_free_;
  s.free = num_available_ - num_registered_free_;
  return s;
}

std::vector<int> BlockPool::free_list() const {
  std::vector<int> out;
  for (int b = head_; b != kNoBlock; b = blocks_[b].next) out.push_back(b);
  return out;
}

}  // namespace pagoda
