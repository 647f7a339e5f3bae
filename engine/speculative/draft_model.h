// DraftModelDrafter: `--speculative draft`, drafting with a second (smaller) model of the same
// vocabulary that runs on the engine thread beside the target, with its own small paged KV
// cache and block manager (speculative.h).
//
// Per speculating sequence it keeps the tokens its cache holds (a prefix of the sequence's
// tokens plus the drafts it fed last time); a draft first trims that to the longest common
// prefix with the sequence's tokens (what the target accepted), feeds the rest of the sequence
// (prompt chunks the first time, then the accepted tokens), then drafts greedily one token per
// draft forward: the main chain. With branches > 1 the draft's next best tokens at the first two
// depths are added as one-token side branches (leaves: they cost no draft forward). A sequence
// the draft cache cannot hold is simply not drafted for.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/speculative/speculative.h"

namespace pagoda {

class Model;

class DraftModelDrafter {
 public:
  // Sizes the draft's cache for max_seqs sequences of ctx_limit tokens (plus a draft each).
  DraftModelDrafter(Model& draft, int block_size, int max_seqs, int ctx_limit, int branches);
  ~DraftModelDrafter();

  // Drafts up to max_draft tokens after `tokens` (a sequence's cache-order tokens, the last not
  // yet computed) for sequence seq_id; n_shifts counts its context shifts (a change: start over).
  DraftTree draft(uint64_t seq_id, const std::vector<int32_t>& tokens, int32_t n_shifts, int max_draft);
  // The sequence finished: its draft cache blocks go back.
  void forget(uint64_t seq_id);
  int num_blocks() const { return num_blocks_; }
  int blocks_in_use() const;

 private:
  struct SeqDraft {
    std::vector<int32_t> cached;  // tokens whose K/V the draft cache holds, in order
    int32_t n_shifts = 0;
  };
  // Runs tokens[from, to) of `tokens` through the draft (cache at `from`), returning the last
  // row's logits. False when the cache has no room.
  bool feed(uint64_t id, const std::vector<int32_t>& tokens, int from, int to, std::vector<float>& logits);

  Model& model_;
  int num_blocks_ = 0;
  int branches_ = 1;
  int ctx_limit_ = 0;
  std::unique_ptr<KvCacheManager> kv_;
  std::unordered_map<uint64_t, SeqDraft> seqs_;
};

}  // namespace pagoda
