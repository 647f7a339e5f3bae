// ResponseStore: a bounded LRU of stored responses (see responses_store.h).
#include "server/openai/responses_store.h"

namespace pagoda::server {

void ResponseStore::put(const std::string& id, StoredResponse r) {
  if (!enabled()) return;
  // What it costs: the serialized size of both halves plus the id (a fair proxy for memory).
  const size_t size = r.response.dump().size() + r.conversation.dump().size() + id.size();
  if (size > max_bytes_) return;
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (!lru_.empty() && (lru_.size() + 1 > max_count_ || bytes_ + size > max_bytes_)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
  lru_.push_front({id, std::move(r), size});
  index_[id] = lru_.begin();
  bytes_ += size;
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return bytes_;
}

}  // namespace pagoda::server
