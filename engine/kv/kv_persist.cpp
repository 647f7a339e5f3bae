// Saving and loading the prefix cache's blocks (see kv_persist.h).
#include "engine/kv/kv_persist.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_map>

namespace pagoda {

namespace {

struct KeyHash {
  size_t operator()(const PrefixKey& k) const { return static_cast<size_t>(k.hash ^ (k.id * 0x9e3779b97f4a7c15ull)); }
};

const PrefixKey kRoot{BlockPool::kRootHash, BlockPool::kRootPrefixId};

// A block that may be saved: in the pool (block >= 0) or in the host tier (rec).
struct Candidate {
  PrefixKey key, parent_key;
  int block = BlockPool::kNoBlock;
  const KvBlockRecord* rec = nullptr;
  int64_t rank = 0;  // higher: more recently used
  int parent = -1;   // index among the candidates; -1: a first block
  int depth = -1;    // blocks before it in its prefix; -1: unknown, -2: its prefix is incomplete
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fills depth (-2 for chains whose parent is missing) by walking up to a known depth.
void compute_depths(std::vector<Candidate>& c) {
  std::vector<int> path;
  for (size_t i = 0; i < c.size(); ++i) {
    int at = static_cast<int>(i);
    path.clear();
    while (at >= 0 && c[at].depth == -1 && path.size() <= c.size()) {
      path.push_back(at);
      at = c[at].parent;
    }
    int d = at == -1 ? -1 : c[at].depth;  // -1 here: the root, so the first block gets 0
    if (at >= 0 && d == -1) d = -2;       // a cycle (cannot happen with real hashes): unusable
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      d = d == -2 ? -2 : d + 1;
      c[*it].depth = d;
    }
  }
}

}  // namespace

KvSaveReport save_kv_cache(const KvCacheManager& kv, const HostKvTier* tier, const KvCacheLayout& layout,
                           const std::string& path, uint64_t max_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  KvSaveReport rep;
  const BlockPool& pool = kv.pool();
  std::vector<Candidate> c;
  std::unordered_map<PrefixKey, int, KeyHash> index;
  auto add = [&](Candidate cand) {
    if (cand.key.id == 0 || index.count(cand.key)) return;
    index.emplace(cand.key, static_cast<int>(c.size()));
    c.push_back(cand);
  };
  const std::vector<int> blocks = kv.registered_blocks_mru();
  const std::vector<const KvBlockRecord*> recs = tier ? tier->entries() : std::vector<const KvBlockRecord*>{};
  int64_t rank = static_cast<int64_t>(blocks.size() + recs.size());
  for (int b : blocks) add({pool.key(b), pool.parent_key(b), b, nullptr, rank--});
  for (const KvBlockRecord* r : recs) add({r->key, r->parent, BlockPool::kNoBlock, r, rank--});
  for (Candidate& x : c) {
    if (x.parent_key == kRoot) continue;
    auto it = index.find(x.parent_key);
    if (it == index.end()) x.depth = -2;  // its parent is gone: its prefix can never match
    else x.parent = it->second;
  }
  compute_depths(c);
  // A parent is ranked at least as recent as any of its children (deepest first).
  std::vector<int> order;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].depth >= 0) order.push_back(static_cast<int>(i));
  rep.left_out = static_cast<int>(c.size() - order.size());
  std::sort(order.begin(), order.end(), [&](int a, int b) { return c[a].depth > c[b].depth; });
  for (int i : order)
    if (c[i].parent >= 0) c[c[i].parent].rank = std::max(c[c[i].parent].rank, c[i].rank);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return c[a].rank != c[b].rank ? c[a].rank > c[b].rank : c[a].depth < c[b].depth;
  });
  // Cut at the budget: any prefix of `order` holds whole chains.
  const uint64_t record = 16ull + 4ull * layout.block_size + layout.block_bytes, overhead = 4096;
  size_t keep = 0;
  while (keep < order.size() && overhead + (keep + 1) * record <= max_bytes) ++keep;
  rep.left_out += static_cast<int>(order.size() - keep);
  order.resize(keep);

  try {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    KvCacheFileWriter w(path, layout, order.size());
    std::vector<int32_t> file_index(c.size(), -1);
    std::vector<uint8_t> buf(layout.block_bytes);
    for (size_t k = 0; k < order.size(); ++k) {
      const Candidate& x = c[order[k]];
      const int32_t parent = x.parent >= 0 ? file_index[x.parent] : -1;
      if (x.rec) {
        w.add(parent, x.rec->tokens.data(), x.rec->bytes.data());
      } else {
        kv.raw_io().read(x.block, buf.data());
        w.add(parent, pool.tokens(x.block).data(), buf.data());
      }
      file_index[order[k]] = static_cast<int32_t>(k);
    }
    w.commit();
    rep.bytes = w.bytes_written();
    rep.blocks = static_cast<int>(order.size());
  } catch (const std::exception& e) {
    rep.error = e.what();
  }
  rep.seconds = since(t0);
  return rep;
}

KvLoadReport load_kv_cache(KvCacheManager& kv, HostKvTier* tier, const KvCacheLayout& layout, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  KvLoadReport rep;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return rep;
  rep.found = true;
  // All or nothing: a file that is wrong anywhere is not trusted anywhere.
  if (std::string why = verify_kv_cache_file(path, layout); !why.empty()) {
    rep.error = why;
    return rep;
  }
  KvCacheFileReader r;
  if (std::string why = r.open(path, layout); !why.empty()) {
    rep.error = why;
    return rep;
  }
  const int B = static_cast<int>(layout.block_size);
  std::vector<PrefixKey> keys;
  std::vector<int> in_pool;  // per file block: its pool block, or kNoBlock
  std::vector<char> known;   // per file block: in the pool or the tier (its children may follow)
  KvFileBlock fb;
  while (r.next(fb)) {
    const PrefixKey parent = fb.parent < 0 ? kRoot : keys[fb.parent];
    const bool parent_known = fb.parent < 0 || known[fb.parent];
    const int parent_block = fb.parent < 0 ? BlockPool::kNoBlock : in_pool[fb.parent];
    const PrefixKey key{kv.pool().hash(parent.hash, fb.tokens.data()),
                        BlockPool::prefix_id_hash(parent.id, fb.tokens.data(), B)};
    keys.push_back(key);
    int b = BlockPool::kNoBlock;
    if (parent_known && (fb.parent < 0 || parent_block != BlockPool::kNoBlock))
      b = kv.restore_block(parent, parent_block, fb.tokens.data(), fb.bytes.data());
    in_pool.push_back(b);
    if (b != BlockPool::kNoBlock) {
      kv.mark_from_disk(b);
      ++rep.to_pool;
      known.push_back(1);
    } else if (parent_known && tier) {
      tier->put(KvBlockRecord{key, parent, std::move(fb.tokens), std::move(fb.bytes)});
      ++rep.to_tier;
      known.push_back(1);
    } else {
      ++rep.dropped;
      known.push_back(0);
    }
  }
  // Held one reference each so far: released least recent (last in the file) first.
  for (auto it = in_pool.rbegin(); it != in_pool.rend(); ++it)
    if (*it != BlockPool::kNoBlock) kv.release_block(*it);
  if (!r.error().empty()) rep.error = r.error();  // changed under us since verify: what is in stays valid
  rep.seconds = since(t0);
  return rep;
}

}  // namespace pagoda
