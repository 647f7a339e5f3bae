#include "engine/kv/kv_cache_manager.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/kv/block_math.h"

namespace pagoda {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, BlockPool::HashFn hash)
    : pool_(num_blocks, block_size, std::move(hash)) {}

KvCacheManager::SeqKv& KvCacheManager::get(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    throw std::out_of_range("KvCacheManager: unknown sequence " + std::to_string(seq));
  return it->second;
}

const KvCacheManager::SeqKv& KvCacheManager::get(uint64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    throw std::out_of_range("KvCacheManager: unknown sequence " + std::to_string(seq));
  return it->second;
}

const std::vector<int32_t>& KvCacheManager::block_table(uint64_t seq) const { return get(seq).table; }

int KvCacheManager::pinned_blocks() const {
  return has_pinned_ ? static_cast<int>(get(pinned_seq_).table.size()) : 0;
}

bool KvCacheManager::is_pinned_block(int block) const {
  if (!has_pinned_) return false;
  const auto& t = get(pinned_seq_).table;
  return std::find(t.begin(), t.end(), block) != t.end();
}

int KvCacheManager::match_prefix(uint64_t seq, const std::vector<int32_t>& tokens, int max_tokens, uint64_t salt) {
  if (seqs_.count(seq)) throw std::logic_error("KvCacheManager: sequence already has blocks");
  const int B = block_size();
  max_tokens = std::min<int>(max_tokens, static_cast<int>(tokens.size()));
  SeqKv& s = seqs_[seq];
  s.root = BlockPool::root_key(salt);
  PrefixKey parent_key = s.root;
  int parent = BlockPool::kNoBlock;
  int matched = 0;
  while (matched + B <= max_tokens) {
    const int32_t* blk_tokens = tokens.data() + matched;
    const PrefixKey key{pool_.hash(parent_key.hash, blk_tokens), BlockPool::prefix_id_hash(parent_key.id, blk_tokens, B)};
    int b = pool_.find(key.hash, parent, blk_tokens, s.root);
    if (!prefix_caching_ && b != BlockPool::kNoBlock && !is_pinned_block(b)) b = BlockPool::kNoBlock;
    if (b != BlockPool::kNoBlock) {
      pool_.retain(b);
      if (auto it = from_disk_.find(b); it != from_disk_.end()) {
        if (it->second == pool_.generation(b)) ++counters_.disk_hits;
        from_disk_.erase(it);
      }
    } else if (tier_ && prefix_caching_) {
      // Evicted earlier: back by copy from host memory, when the tier still has it.
      KvBlockRecord rec;
      if (!tier_->take(key, blk_tokens, rec)) break;
      b = restore_block(parent_key, parent, blk_tokens, rec.bytes.data());
      if (b == BlockPool::kNoBlock) {
        tier_->put(std::move(rec));
        break;
      }
      ++counters_.restored;
    } else {
      break;
    }
    s.table.push_back(b);
    s.hashes.push_back(key.hash);
    s.ids.push_back(key.id);
    parent_key = key;
    parent = b;
    matched += B;
  }
  // The pinned prefix's partial tail block: shared only when every full block before it matched
  // the pinned blocks themselves and the prompt starts with the whole pinned prefix.
  const int P = static_cast<int>(pinned_tokens_.size());
  if (has_pinned_ && salt == 0 && P % B != 0 && matched == (P / B) * B && max_tokens > matched &&
      static_cast<int>(tokens.size()) >= P &&
      std::equal(pinned_tokens_.begin(), pinned_tokens_.end(), tokens.begin())) {
    const auto& pt = get(pinned_seq_).table;
    if (std::equal(s.table.begin(), s.table.end(), pt.begin())) {
      pool_.retain(pt[P / B]);
      s.table.push_back(pt[P / B]);
      matched = std::min(P, max_tokens);
    }
  }
  return matched;
}

int KvCacheManager::blocks_needed(uint64_t seq, int num_computed, int n) const {
  if (n <= 0) return 0;
  const int B = block_size();
  auto it = seqs_.find(seq);
  const int have = it == seqs_.end() ? 0 : static_cast<int>(it->second.table.size());
  const int need = ceil_div(num_computed + n, B);
  int count = std::max(0, need - have);
  if (it != seqs_.end()) {
    for (int bi = num_computed / B; bi < std::min(need, have); ++bi)
      if (pool_.ref_count(it->second.table[bi]) > 1) ++count;  // copy-on-write
  }
  return count;
}

int KvCacheManager::claim_fresh() {
  const int b = pool_.allocate();
  // A block freed earlier in this step may still have a queued K shift; as a copy destination
  // it would be re-roped after the copy. Its old contents are dead: drop the shift.
  shifts_.erase(std::remove_if(shifts_.begin(), shifts_.end(), [&](const KShift& k) { return k.block == b; }),
                shifts_.end());
  return b;
}

bool KvCacheManager::allocate(uint64_t seq, int num_computed, int n) {
  if (n <= 0) return true;
  if (blocks_needed(seq, num_computed, n) > pool_.num_available()) return false;
  const int B = block_size();
  SeqKv& s = seqs_[seq];
  const int need = ceil_div(num_computed + n, B);
  const int have = static_cast<int>(s.table.size());
  for (int bi = num_computed / B; bi < std::min(need, have); ++bi) {
    const int old = s.table[bi];
    if (pool_.ref_count(old) > 1) {
      const int fresh = claim_fresh();
      copies_.push_back({old, fresh});
      pool_.release(old);  // still referenced by its other owners
      s.table[bi] = fresh;
    } else if (pool_.is_registered(old)) {
      // Writing into a registered block would corrupt the prefix cache; it no longer matches.
      pool_.unregister(old);
    }
  }
  // A written block is no longer a registered prefix of this sequence.
  if (static_cast<int>(s.hashes.size()) > num_computed / B) {
    s.hashes.resize(num_computed / B);
    s.ids.resize(num_computed / B);
  }
  for (int bi = have; bi < need; ++bi) s.table.push_back(pool_.allocate());
  return true;
}

void KvCacheManager::commit(uint64_t seq, const std::vector<int32_t>& tokens, int num_computed) {
  SeqKv& s = get(seq);
  if (!s.cacheable) return;
  const int B = block_size();
  const int full = std::min<int>(num_computed / B, static_cast<int>(s.table.size()));
  for (int bi = static_cast<int>(s.hashes.size()); bi < full; ++bi) {
    // A block after a hole cannot name its parent block: it stays unregistered.
    if (s.table[bi] == kHole || (bi > 0 && s.table[bi - 1] == kHole)) break;
    const uint64_t parent_hash = bi == 0 ? s.root.hash : s.hashes[bi - 1];
    const uint64_t parent_id = bi == 0 ? s.root.id : s.ids[bi - 1];
    const int32_t* blk_tokens = tokens.data() + static_cast<size_t>(bi) * B;
    const uint64_t h = pool_.hash(parent_hash, blk_tokens);
    const uint64_t id = BlockPool::prefix_id_hash(parent_id, blk_tokens, B);
    pool_.register_block(s.table[bi], h, bi == 0 ? BlockPool::kNoBlock : s.table[bi - 1], blk_tokens, id, s.root);
    s.hashes.push_back(h);
    s.ids.push_back(id);
  }
}

void KvCacheManager::free(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  if (has_pinned_ && seq == pinned_seq_) throw std::logic_error("KvCacheManager: freeing the pinned prefix");
  const auto& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b)
    if (*b != kHole) pool_.release(*b);
  seqs_.erase(it);
}

void KvCacheManager::fork(uint64_t parent, uint64_t child, int num_tokens) {
  if (seqs_.count(child)) throw std::logic_error("KvCacheManager: fork into an existing sequence");
  const SeqKv& p = get(parent);
  const int B = block_size();
  const int n_blocks = std::min<int>(ceil_div(num_tokens, B), static_cast<int>(p.table.size()));
  SeqKv c;
  c.table.assign(p.table.begin(), p.table.begin() + n_blocks);
  c.hashes.assign(p.hashes.begin(), p.hashes.begin() + std::min<int>(num_tokens / B, static_cast<int>(p.hashes.size())));
  c.ids.assign(p.ids.begin(), p.ids.begin() + static_cast<std::ptrdiff_t>(c.hashes.size()));
  c.cacheable = p.cacheable;
  c.root = p.root;
  for (int b : c.table)
    if (b != kHole) pool_.retain(b);
  seqs_.emplace(child, std::move(c));
}

bool KvCacheManager::shift(uint64_t seq, int num_computed, int n_keep, int n_discard) {
  SeqKv& s = get(seq);
  const int B = block_size();
  if (n_keep < 0 || n_discard <= 0 || n_keep % B || n_discard % B) return false;
  if (num_computed <= n_keep + n_discard) return false;
  const int first_drop = n_keep / B;
  const int end_drop = (n_keep + n_discard) / B;
  if (end_drop > static_cast<int>(s.table.size())) return false;
  // Enough blocks for the copies of shared later blocks, counting what the drop frees?
  int copies_needed = 0, freed = 0;
  for (int bi = end_drop; bi < static_cast<int>(s.table.size()); ++bi)
    if (s.table[bi] != kHole && pool_.ref_count(s.table[bi]) > 1) ++copies_needed;
  for (int bi = first_drop; bi < end_drop; ++bi)
    if (s.table[bi] != kHole && pool_.ref_count(s.table[bi]) == 1) ++freed;
  if (copies_needed > pool_.num_available() + freed) return false;

  for (int bi = end_drop - 1; bi >= first_drop; --bi)
    if (s.table[bi] != kHole) pool_.release(s.table[bi]);
  for (int bi = end_drop; bi < static_cast<int>(s.table.size()); ++bi) {
    int b = s.table[bi];
    if (b == kHole) continue;  // behind the window: shifts back with the rest, still unread
    if (pool_.ref_count(b) > 1) {
      const int fresh = claim_fresh();
      copies_.push_back({b, fresh});  // the other owners keep the unshifted original
      pool_.release(b);
      b = fresh;
      s.table[bi] = b;
    } else {
      pool_.unregister(b);  // its positions change: it is no longer that prefix
    }
    shifts_.push_back({b, -n_discard});
  }
  s.table.erase(s.table.begin() + first_drop, s.table.begin() + end_drop);
  s.holes_upto = std::min(s.holes_upto, first_drop);
  if (static_cast<int>(s.hashes.size()) > first_drop) {
    s.hashes.resize(first_drop);
    s.ids.resize(first_drop);
  }
  // Later blocks were computed attending to the dropped tokens: never a reusable prefix.
  s.cacheable = false;
  return true;
}

void KvCacheManager::pin(uint64_t seq, const std::vector<int32_t>& tokens) {
  if (has_pinned_) throw std::logic_error("KvCacheManager: a prefix is already pinned");
  const SeqKv& s = get(seq);
  if (static_cast<int>(s.table.size()) < ceil_div(static_cast<int>(tokens.size()), block_size()))
    throw std::logic_error("KvCacheManager: pinned sequence does not hold its tokens");
  has_pinned_ = true;
  pinned_seq_ = seq;
  pinned_tokens_ = tokens;
}

void KvCacheManager::take_edits(std::vector<BlockCopy>& copies, std::vector<KShift>& shifts) {
  copies.insert(copies.end(), copies_.begin(), copies_.end());
  shifts.insert(shifts.end(), shifts_.begin(), shifts_.end());
  copies_.clear();
  shifts_.clear();
}

void KvCacheManager::set_host_tier(HostKvTier* tier) {
  tier_ = tier;
  if (tier_ && io_.bytes == 0) throw std::logic_error("KvCacheManager: a host tier needs raw block access");
  if (tier_) pool_.set_evict_hook([this](int block) { spill(block); });
  else pool_.set_evict_hook(nullptr);
}

void KvCacheManager::spill(int block) {
  KvBlockRecord rec;
  rec.key = pool_.key(block);
  if (rec.key.id == 0) return;  // registered without the second hash: not identifiable off the pool
  rec.parent = pool_.parent_key(block);
  rec.tokens = pool_.tokens(block);
  rec.bytes.resize(io_.bytes);
  io_.read(block, rec.bytes.data());
  tier_->put(std::move(rec));
  ++counters_.spilled;
}

int KvCacheManager::restore_block(const PrefixKey& parent, int parent_block, const int32_t* tokens, const void* bytes) {
  const int B = block_size();
  const PrefixKey key{pool_.hash(parent.hash, tokens), BlockPool::prefix_id_hash(parent.id, tokens, B)};
  // For a first block `parent` is the root it chains from.
  if (int b = pool_.find(key.hash, parent_block, tokens, parent); b != BlockPool::kNoBlock) {
    pool_.retain(b);
    return b;
  }
  if (pool_.num_available() == 0 || io_.bytes == 0) return BlockPool::kNoBlock;
  const int b = claim_fresh();
  // A copy queued this step still reads this block's old contents when the forward pass
  // applies it: writing now would change what it copies. Rare (the source was freed since);
  // give the block back and recompute instead.
  if (std::any_of(copies_.begin(), copies_.end(), [&](const BlockCopy& c) { return c.src == b; })) {
    pool_.release(b);
    return BlockPool::kNoBlock;
  }
  io_.write(b, bytes);
  pool_.register_block(b, key.hash, parent_block, tokens, key.id, parent);
  return b;
}

std::vector<int> KvCacheManager::registered_blocks_mru() const {
  std::vector<int> out;
  for (int b = 0; b < pool_.num_blocks(); ++b)
    if (pool_.ref_count(b) > 0 && pool_.is_registered(b)) out.push_back(b);
  const std::vector<int> free = pool_.free_list();  // head: next evicted
  for (auto it = free.rbegin(); it != free.rend(); ++it)
    if (pool_.is_registered(*it)) out.push_back(*it);
  return out;
}

}  // namespace pagoda
