// HostKvTier: the host-memory LRU of evicted prefix blocks (see host_kv_tier.h).
#include "engine/kv/host_kv_tier.h"

#include <algorithm>

namespace pagoda {

size_t auto_host_tier_bytes(bool kv_on_device, size_t device_kv_bytes, size_t host_free_bytes) {
  if (!kv_on_device) return 0;
  return std::min(device_kv_bytes / 2, host_free_bytes / 4);
}

void HostKvTier::put(KvBlockRecord rec) {
  if (auto it = index_.find(rec.key); it != index_.end()) {
    bytes_ -= it->second->footprint();
    lru_.erase(it->second);
    index_.erase(it);
  }
  const size_t size = rec.footprint();
  if (size > max_bytes_) return;
  while (bytes_ + size > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().footprint();
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front(std::move(rec));
  index_[lru_.front().key] = lru_.begin();
  bytes_ += size;
}

bool HostKvTier::take(const PrefixKey& key, const int32_t* tokens, KvBlockRecord& out) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const KvBlockRecord& rec = *it->second;
  if (!std::equal(rec.tokens.begin(), rec.tokens.end(), tokens)) return false;
  bytes_ -= rec.footprint();
  out = std::move(*it->second);
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

std::vector<const KvBlockRecord*> HostKvTier::entries() const {
  std::vector<const KvBlockRecord*> out;
  out.reserve(lru_.size());
  for (const KvBlockRecord& r : lru_) out.push_back(&r);
  return out;
}

}  // namespace pagoda
