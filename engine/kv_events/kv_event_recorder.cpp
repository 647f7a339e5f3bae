#include "engine/kv_events/kv_event_recorder.h"

#include "engine/kv_events/block_hash.h"
#include "engine/kv_events/msgpack_writer.h"

namespace pagoda::kv_events {

KvEventRecorder::KvEventRecorder(int block_size, uint64_t base_root, const std::string& seed)
    : block_size_(block_size), base_root_(base_root), root_(root_block_hash(seed)) {}

void KvEventRecorder::block_stored(int block, int parent_block, uint64_t root_hash, const int32_t* tokens, int n) {
  std::optional<uint64_t> parent;
  uint64_t extra = 0;
  if (parent_block < 0) {
    extra = root_hash == base_root_ ? 0 : root_hash;
  } else if (auto it = blocks_.find(parent_block); it != blocks_.end()) {
    parent = it->second.hash;
    extra = it->second.extra;
  }
  const uint64_t h = block_hash(parent.value_or(root_), tokens, n, extra);
  blocks_[block] = {h, extra};
  MsgpackWriter w;
  w.array(7);
  w.str("BlockStored");
  w.array(1);
  w.uint(h);
  if (parent) w.uint(*parent); else w.nil();
  w.array(uint32_t(n));
  for (int i = 0; i < n; ++i) w.uint(uint32_t(tokens[i]));
  w.int64(block_size_);
  w.nil();  // lora_id
  w.nil();  // medium: the default tier
  events_.push_back(w.take());
}

void KvEventRecorder::block_removed(int block) {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) return;
  MsgpackWriter w;
  w.array(3);
  w.str("BlockRemoved");
  w.array(1);
  w.uint(it->second.hash);
  w.nil();  // medium
  events_.push_back(w.take());
  blocks_.erase(it);
}

void KvEventRecorder::all_cleared() {
  blocks_.clear();
  MsgpackWriter w;
  w.array(1);
  w.str("AllBlocksCleared");
  events_.push_back(w.take());
}

std::string KvEventRecorder::take_batch(double ts) {
  MsgpackWriter w;
  w.array(2);
  w.float64(ts);
  w.array(uint32_t(events_.size()));
  std::string out = w.take();
  for (auto& e : events_) out += e;
  events_.clear();
  return out;
}

std::optional<uint64_t> KvEventRecorder::hash_of(int block) const {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) return std::nullopt;
  return it->second.hash;
}

}  // namespace pagoda::kv_events
