// LlmEngine, continued: the persistent prefix cache and its host-memory tier (README,
// "Persistent prefix cache"; kv_persist.h has the policy, kv_cache_file.h the format).
#include <spdlog/spdlog.h>

#include <filesystem>

#include "engine/loop/engine.h"
#include "engine/kv/host_kv_tier.h"
#include "engine/kv/kv_persist.h"

namespace pagoda {

namespace {
constexpr const char* kFileName = "prefix-cache.pgkv";
}

std::string LlmEngine::kv_cache_file() const {
  return cfg_.kv_cache_dir.empty() ? "" : (std::filesystem::path(cfg_.kv_cache_dir) / kFileName).string();
}

void LlmEngine::setup_kv_tiers() {
  Backend& be = model_.backend();
  if (cfg_.kv_host_memory_auto && cfg_.kv_host_memory == 0)
    cfg_.kv_host_memory = auto_host_tier_bytes(be.memory_info().device,
                                               static_cast<size_t>(num_blocks_) * be.kv_block_raw_bytes(),
                                               host_memory_info().free_bytes);
  if (cfg_.kv_cache_dir.empty() && cfg_.kv_host_memory == 0) return;
  const size_t raw = be.kv_block_raw_bytes();
  if (raw == 0) {
    spdlog::warn("engine: backend '{}' has no raw KV block access: --kv-cache-dir and --kv-host-memory are off",
                 be.name());
    cfg_.kv_cache_dir.clear();
    cfg_.kv_host_memory = 0;
    return;
  }
  kv_->set_raw_io({raw, [&be](int b, void* out) { be.read_kv_block_raw(b, out); },
                   [&be](int b, const void* in) { be.write_kv_block_raw(b, in); }});
  if (cfg_.kv_host_memory > 0) {
    host_tier_ = std::make_unique<HostKvTier>(cfg_.kv_host_memory);
    kv_->set_host_tier(host_tier_.get());
    spdlog::info("engine: host-memory tier of {:.1f} MiB for evicted prefix blocks ({} blocks)",
                 cfg_.kv_host_memory / 1048576.0, cfg_.kv_host_memory / (raw + 4 * cfg_.block_size + 96));
  }
  const ModelConfig& mc = model_.config();
  KvCacheLayout& l = kv_layout_;
  l.model_id = cfg_.model_identity;
  l.block_size = static_cast<uint32_t>(cfg_.block_size);
  l.kv_type_k = static_cast<uint32_t>(model_.kv_cache_types().k);
  l.kv_type_v = static_cast<uint32_t>(model_.kv_cache_types().v);
  l.n_layers = static_cast<uint32_t>(mc.n_layers);
  l.n_kv_heads = static_cast<uint32_t>(mc.n_kv_heads);
  l.head_dim = static_cast<uint32_t>(mc.head_dim);
  l.block_bytes = raw;
  l.rope_dims = static_cast<uint32_t>(mc.n_rot);
  l.rope_freq_base = mc.rope_freq_base;
  l.rope_freq_scale = mc.rope_freq_scale;
  l.rope_neox = mc.rope_neox ? 1 : 0;
  l.rope_factors_hash = mc.rope_freq_factors.empty()
                            ? 0
                            : kv_checksum(mc.rope_freq_factors.data(), mc.rope_freq_factors.size() * sizeof(float));
  if (!cfg_.kv_cache_dir.empty() && cfg_.model_identity.empty())
    spdlog::warn("engine: --kv-cache-dir without a model identity: the file is keyed on the layout alone");
}

void LlmEngine::load_kv_file() {
  if (cfg_.kv_cache_dir.empty()) return;
  const std::string path = kv_cache_file();
  const KvLoadReport r = load_kv_cache(*kv_, host_tier_.get(), kv_layout_, path);
  if (!r.found) {
    spdlog::info("engine: no prefix cache file at {} yet (it is written on a clean stop)", path);
  } else if (r.to_pool == 0 && r.to_tier == 0 && !r.error.empty()) {
    spdlog::warn("engine: ignoring the prefix cache file {}: {}", path, r.error);
  } else {
    if (!r.error.empty()) spdlog::warn("engine: the prefix cache file {} changed while read: {}", path, r.error);
    spdlog::info("engine: restored {} prefix blocks ({} tokens) from {} in {:.3f} s; {} to the host tier, {} dropped",
                 r.to_pool, r.to_pool * cfg_.block_size, path, r.seconds, r.to_tier, r.dropped);
  }
  kv_disk_loaded_ += static_cast<uint64_t>(r.to_pool + r.to_tier);
  update_stats(false);
}

PrefixCacheSaveResult LlmEngine::save_kv_file() {
  PrefixCacheSaveResult out;
  out.path = kv_cache_file();
  const KvSaveReport r = save_kv_cache(*kv_, host_tier_.get(), kv_layout_, out.path, cfg_.kv_cache_dir_max_bytes);
  out.ok = r.error.empty();
  out.error = r.error;
  out.blocks = r.blocks;
  out.tokens = r.blocks * cfg_.block_size;
  out.left_out = r.left_out;
  out.bytes = r.bytes;
  out.seconds = r.seconds;
  if (out.ok) {
    kv_disk_saved_ += static_cast<uint64_t>(r.blocks);
    ++kv_disk_saves_;
    spdlog::info("engine: saved {} prefix blocks ({} tokens, {:.1f} MiB) to {} in {:.3f} s; {} left out", r.blocks,
                 out.tokens, r.bytes / 1048576.0, out.path, r.seconds, r.left_out);
  } else {
    spdlog::error("engine: saving the prefix cache to {} failed: {}", out.path, r.error);
  }
  update_stats(false);
  return out;
}

PrefixCacheSaveResult LlmEngine::save_prefix_cache() {
  if (cfg_.kv_cache_dir.empty()) return EngineApi::save_prefix_cache();
  PrefixCacheSaveResult out;
  try {
    run_on_engine_thread([&](Model&, KvCacheManager&) { out = save_kv_file(); });
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace pagoda
