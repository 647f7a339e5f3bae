#include "engine/loop/kv_budget.h"

#include <algorithm>
#include <stdexcept>

#include "engine/kv/block_math.h"
#include "engine/loop/engine.h"

namespace pagoda {
namespace {

std::string mib(double bytes) { return std::to_string(static_cast<long long>(bytes / (1 << 20))) + " MiB"; }

}  // namespace

KvBudget kv_budget(const EngineConfig& cfg, const MemoryInfo& mem, size_t block_bytes, int ctx_tokens) {
  KvBudget b;
  if (cfg.kv_cache_memory > 0) {
    b.blocks = cfg.kv_cache_memory / block_bytes;
    b.basis = "kv_cache_memory of " + mib(static_cast<double>(cfg.kv_cache_memory));
    return b;
  }
  if (mem.device) {
    if (!(cfg.device_memory_fraction > 0.0 && cfg.device_memory_fraction <= 1.0))
      throw std::invalid_argument("the device memory fraction must be in (0, 1]");
    const double allowed = cfg.device_memory_fraction * static_cast<double>(mem.total_bytes);
    const double used = static_cast<double>(mem.total_bytes - mem.free_bytes);
    const size_t bytes = allowed > used ? static_cast<size_t>(allowed - used) : 0;
    b.blocks = bytes / block_bytes;
    b.basis = "device memory fraction " + std::to_string(cfg.device_memory_fraction) + " of " +
              mib(static_cast<double>(mem.total_bytes)) + ", " + mib(used) + " of it in use";
    return b;
  }
  const int B = cfg.block_size;
  const int sys_blocks = ceil_div(static_cast<int>(cfg.system_prompt.size()), B);
  const double budget = static_cast<double>(mem.free_bytes) * cfg.kv_cache_fraction;
  const size_t useful = 2 * static_cast<size_t>(cfg.max_seqs) * ceil_div(ctx_tokens, B) + sys_blocks;
  b.blocks = std::min(static_cast<size_t>(budget / static_cast<double>(block_bytes)), useful);
  b.basis = "host memory fraction " + std::to_string(cfg.kv_cache_fraction) + " of " +
            mib(static_cast<double>(mem.free_bytes)) + " available";
  return b;
}

size_t kv_bytes_for_sequences(int n_seqs, int tokens, int block_size, size_t block_bytes) {
  return static_cast<size_t>(n_seqs) * static_cast<size_t>(ceil_div(tokens, block_size) + 1) * block_bytes;
}

}  // namespace pagoda
