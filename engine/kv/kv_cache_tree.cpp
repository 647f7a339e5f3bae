// KvCacheManager's part in speculative decoding: keeping a verified tree's accepted path and
// releasing the rest of the tree's blocks (kv_cache_manager.h, speculative.h).
#include <stdexcept>

#include "engine/kv/block_math.h"
#include "engine/kv/kv_cache_manager.h"

namespace pagoda {

void KvCacheManager::keep_tree_path(uint64_t seq, int n_past, const std::vector<int>& path) {
  SeqKv& s = get(seq);
  const int B = block_size();
  const auto slot = [&](int index) {
    return s.table.at(static_cast<size_t>(index / B)) * B + index % B;
  };
  // Depth d's node sits at n_past + path[d] >= n_past + d. Copies in increasing destination
  // order never overwrite a later copy's source (sources lie at or beyond their destination,
  // and each destination is below every later source).
  for (size_t d = 1; d < path.size(); ++d) {
    if (path[d] < static_cast<int>(d)) throw std::logic_error("KvCacheManager: a tree path out of order");
    if (path[d] != static_cast<int>(d))
      slot_copies_.push_back({slot(n_past + path[d]), slot(n_past + static_cast<int>(d))});
  }
  const size_t keep = static_cast<size_t>(ceil_div(n_past + static_cast<int>(path.size()), B));
  while (s.table.size() > keep) {
    pool_.release(s.table.back());
    s.table.pop_back();
  }
}

void KvCacheManager::take_slot_copies(std::vector<SlotCopy>& copies) {
  copies.insert(copies.end(), slot_copies_.begin(), slot_copies_.end());
  slot_copies_.clear();
}

}  // namespace pagoda
