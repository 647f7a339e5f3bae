// The KV cache budget: how many blocks the engine's cache gets. The one place that decides it,
// from the configuration and the backend's memory (Backend::memory_info), whatever the backend.
#pragma once

#include <cstddef>
#include <string>

#include "engine/backend/backend.h"

namespace pagoda {

struct EngineConfig;

struct KvBudget {
  size_t blocks = 0;
  std::string basis;  // how it was sized, for the log and for errors
};

// Blocks of `block_bytes` for the cache of an engine configured by `cfg` whose sequences hold
// up to `ctx_tokens` tokens. `block_bytes` is Backend::kv_block_bytes: a block's K rows plus its
// V rows over all layers, each half in its own element type (cfg.kv_types), so an f16 K with a
// q8_0 V costs 2 + 34/32 bytes per value pair, not 2 x either. In this order:
// - cfg.kv_cache_memory > 0: that many bytes.
// - device memory (a GPU's): cfg.device_memory_fraction of its total, less what is in use
//   already (the weights and activations: ask after the model is loaded), like vLLM's
//   gpu_memory_utilization. The budget is 0 when they already exceed that share.
// - host memory: cfg.kv_cache_fraction of what is available now, capped at what can ever be
//   used: max_seqs full contexts twice over (room for prefix-cache reuse) plus the system
//   prompt's blocks.
// Throws std::invalid_argument for a device fraction outside (0, 1].
KvBudget kv_budget(const EngineConfig& cfg, const MemoryInfo& mem, size_t block_bytes, int ctx_tokens);

// The bytes of a cache that holds `n_seqs` sequences of up to `tokens` tokens each at once, a
// block more each (a partly filled block, the step's new token): what a caller that knows its
// whole load (`pagoda generate`) sets EngineConfig::kv_cache_memory to.
size_t kv_bytes_for_sequences(int n_seqs, int tokens, int block_size, size_t block_bytes);

}  // namespace pagoda
