// The engine's side of the KV event stream (--kv-events): the recorder observes the prefix
// cache from the start (the first batch says the cache is empty), and after every turn of the
// engine loop the events of that turn go out as one batch. cached_blocks() reads the cache and
// the recorder together on the engine thread, for tests and debugging.
#include <chrono>

#include "engine/loop/engine.h"

namespace pagoda {

void LlmEngine::setup_kv_events() {
  if (cfg_.kv_events_endpoint.empty()) return;
  kv_events_pub_ = std::make_unique<kv_events::ZmqPublisher>(cfg_.kv_events_endpoint, cfg_.kv_events_topic);
  kv_events_ = std::make_unique<kv_events::KvEventRecorder>(cfg_.block_size, BlockPool::root_key(0).hash,
                                                            cfg_.kv_events_seed);
  kv_events_->all_cleared();
  kv_->pool().set_observer(kv_events_.get());
}

void LlmEngine::publish_kv_events() {
  if (!kv_events_ || !kv_events_->pending()) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  kv_events_pub_->send(kv_events_->take_batch(now));
}

std::optional<EngineApi::CachedBlocks> LlmEngine::cached_blocks() {
  if (!kv_events_) return std::nullopt;
  CachedBlocks out;
  run_on_engine_thread([&](Model&, KvCacheManager& kv) {
    for (int b : kv.registered_blocks_mru()) {
      ++out.blocks;
      if (auto h = kv_events_->hash_of(b)) out.hashes.push_back(*h);
    }
  });
  return out;
}

}  // namespace pagoda
