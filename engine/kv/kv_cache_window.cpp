// KvCacheManager's sliding-window release (kv_cache_manager.h): when every layer of the model
// attends only to the last W positions, a block all of whose positions lie behind the window
// of every later query is never read again. Its reference is dropped (a block another sequence
// shares, the pinned prefix's or a registered prefix block stays for them and the prefix cache)
// and its table entry becomes kHole; the attention kernels start each row at position - W + 1,
// so they never address a hole. Models with a global layer (gemma2/gemma3) release nothing.
#include <algorithm>

#include "engine/kv/block_math.h"
#include "engine/kv/kv_cache_manager.h"

namespace pagoda {

int KvCacheManager::release_behind_window(uint64_t seq, int num_computed, int keep_tokens) {
  if (window_ <= 0 || (has_pinned_ && seq == pinned_seq_)) return 0;
  SeqKv& s = get(seq);
  const int B = block_size();
  // The next step's first query sits at num_computed and reads from num_computed - W + 1:
  // blocks ending at or before that position (exclusive) are dead.
  const int first_read = num_computed - window_ + 1;
  const int dead = std::min<int>(first_read > 0 ? first_read / B : 0, static_cast<int>(s.table.size()));
  const int keep_blocks = ceil_div(std::max(keep_tokens, 0), B);
  int released = 0;
  for (int bi = std::max(keep_blocks, s.holes_upto); bi < dead; ++bi) {
    if (s.table[bi] == kHole) continue;
    pool_.release(s.table[bi]);
    s.table[bi] = kHole;
    ++released;
  }
  s.holes_upto = std::max(s.holes_upto, dead);
  return released;
}

int KvCacheManager::blocks_held(uint64_t seq) const {
  const auto& t = get(seq).table;
  return static_cast<int>(std::count_if(t.begin(), t.end(), [](int32_t b) { return b != kHole; }));
}

}  // namespace pagoda
