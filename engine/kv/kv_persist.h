// The persistent prefix cache (--kv-cache-dir; README, "Persistent prefix cache"): saving the
// cached full blocks of a KvCacheManager (and of its host tier) to the disk file, and loading
// them back at start. The file format is kv_cache_file.h; this is the policy:
// - Save: every registered block (held or cached) and every host-tier entry, most recently
//   used first, a parent always before its children (a parent is ranked at least as recent as
//   any child), cut at the byte budget; so any prefix of the file is a usable set of chains.
// - Load: the whole file is verified first (a bad file is ignored, with the reason); then its
//   blocks are written into fresh pool blocks and registered under the keys their tokens chain
//   to, in file order, until the pool is full; the rest go to the host tier (when there is one).
//   They are released least recent first, so the pool's LRU evicts them in that order.
#pragma once

#include <cstdint>
#include <string>

#include "engine/kv/host_kv_tier.h"
#include "engine/kv/kv_cache_file.h"
#include "engine/kv/kv_cache_manager.h"

namespace pagoda {

struct KvSaveReport {
  std::string error;     // empty: saved
  int blocks = 0;        // written
  int left_out = 0;      // over the byte budget, or whose prefix was incomplete
  uint64_t bytes = 0;    // the file's size
  double seconds = 0;
};

// `kv` must have raw block access (KvCacheManager::set_raw_io); `tier` may be null.
KvSaveReport save_kv_cache(const KvCacheManager& kv, const HostKvTier* tier, const KvCacheLayout& layout,
                           const std::string& path, uint64_t max_bytes);

struct KvLoadReport {
  std::string error;     // why the file was ignored; empty: loaded (or there was none)
  bool found = false;    // a file was there
  int to_pool = 0;       // blocks now cached in the pool
  int to_tier = 0;       // blocks put in the host tier
  int dropped = 0;       // neither (no room, or their parent was not loaded)
  double seconds = 0;
};

KvLoadReport load_kv_cache(KvCacheManager& kv, HostKvTier* tier, const KvCacheLayout& layout, const std::string& path);

}  // namespace pagoda
