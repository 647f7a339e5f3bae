// DraftModelDrafter (draft_model.h).
#include "engine/speculative/draft_model.h"

#include <algorithm>

#include "engine/kv/block_math.h"
#include "engine/model/model.h"

namespace pagoda {
namespace {

// Token ids of one logit row, best first (ties: lower id), the best `k`.
std::vector<int32_t> top_tokens(const float* row, int vocab, int k) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
  k = std::min(k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

}  // namespace

DraftModelDrafter::DraftModelDrafter(Model& draft, int block_size, int max_seqs, int ctx_limit, int branches)
    : model_(draft), branches_(std::max(1, branches)), ctx_limit_(ctx_limit) {
  // Room for every sequence's whole context, within 1 GiB with the model's reserved blocks
  // (at least one whole context).
  const int per_seq = ceil_div(ctx_limit + StepPlan::kMaxTreeTokens, block_size) + 1;
  const size_t reserved = static_cast<size_t>(model_.kv_reserved_blocks());
  const size_t fit = (size_t{1} << 30) / std::max<size_t>(1, model_.kv_block_bytes(block_size));
  const size_t cap = fit > reserved ? fit - reserved : 0;
  num_blocks_ = static_cast<int>(std::max<size_t>(per_seq, std::min<size_t>(static_cast<size_t>(max_seqs) * per_seq, cap)));
  model_.init_kv_cache(num_blocks_, block_size);
  kv_ = std::make_unique<KvCacheManager>(num_blocks_, block_size);
  kv_->set_prefix_caching(false);
}

DraftModelDrafter::~DraftModelDrafter() = default;

int DraftModelDrafter::blocks_in_use() const { return kv_->pool().stats().used; }

void DraftModelDrafter::forget(uint64_t seq_id) {
  kv_->free(seq_id);
  seqs_.erase(seq_id);
}

bool DraftModelDrafter::feed(uint64_t id, const std::vector<int32_t>& tokens, int from, int to,
                             std::vector<float>& logits) {
  const int B = kv_->block_size();
  while (from < to) {
    const int n = std::min(to - from, model_.max_batch_tokens());
    if (!kv_->allocate(id, from, n)) return false;
    const auto& table = kv_->block_table(id);
    StepPlan plan;
    SeqInStep s;
    s.seq_id = id;
    s.n_tokens = n;
    s.n_past = from;
    s.n_blocks = ceil_div(from + n, B);
    plan.block_tables.assign(table.begin(), table.begin() + s.n_blocks);
    for (int i = from; i < from + n; ++i) {
      plan.tokens.push_back(tokens[static_cast<size_t>(i)]);
      plan.positions.push_back(i);
      plan.slots.push_back(table[static_cast<size_t>(i / B)] * B + i % B);
      plan.token_seq.push_back(0);
    }
    plan.seqs.push_back(s);
    plan.logit_rows.push_back(n - 1);
    kv_->take_edits(plan.block_copies, plan.k_shifts);
    model_.forward(plan, logits);
    from += n;
  }
  return true;
}

DraftTree DraftModelDrafter::draft(uint64_t seq_id, const std::vector<int32_t>& tokens, int32_t n_shifts,
                                   int max_draft) {
  DraftTree tree(tokens.back());
  SeqDraft& st = seqs_[seq_id];
  if (st.n_shifts != n_shifts) {  // a context shift rewrote the tokens: start over
    kv_->free(seq_id);
    st = SeqDraft{};
    st.n_shifts = n_shifts;
  }
  // Keep the longest prefix the sequence still has (the accepted part of the last draft).
  size_t keep = 0;
  while (keep < st.cached.size() && keep < tokens.size() && st.cached[keep] == tokens[keep]) ++keep;
  st.cached.resize(keep);
  const int vocab = model_.config().vocab_size;
  const int side = branches_ > 1 ? 2 * (branches_ - 1) : 0;
  const int main_len = std::max(1, max_draft - side);
  if (static_cast<int>(tokens.size()) + main_len > ctx_limit_ + StepPlan::kMaxTreeTokens) return tree;
  std::vector<int32_t> context = tokens;
  std::vector<float> logits;
  if (keep == context.size()) {  // everything cached already: re-feed the root for its logits
    --keep;
    st.cached.resize(keep);
  }
  if (!feed(seq_id, context, static_cast<int>(keep), static_cast<int>(context.size()), logits)) {
    forget(seq_id);
    return tree;
  }
  std::vector<std::pair<int, std::vector<int32_t>>> alternatives;  // (parent node, tokens)
  int node = 0;
  for (int d = 0; d < main_len; ++d) {
    const std::vector<int32_t> best = top_tokens(logits.data(), vocab, d < 2 ? branches_ : 1);
    alternatives.emplace_back(node, std::vector<int32_t>(best.begin() + 1, best.end()));
    node = tree.add(node, best[0]);
    context.push_back(best[0]);
    if (d + 1 == main_len) break;
    const int at = static_cast<int>(context.size()) - 1;
    if (!feed(seq_id, context, at, at + 1, logits)) {
      forget(seq_id);
      return DraftTree(tokens.back());
    }
  }
  st.cached.assign(context.begin(), context.end() - 1);  // the last draft was never fed
  for (const auto& [parent, toks] : alternatives)
    for (int32_t t : toks)
      if (tree.drafted() < max_draft && tree.child(parent, t) < 0) tree.add(parent, t);
  return tree;
}

}  // namespace pagoda
