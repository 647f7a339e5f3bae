#include "engine/backend/step_plan.h"

#include <bit>
#include <stdexcept>
#include <string>

namespace pagoda {
namespace {

void require(bool ok, const char* who, const char* what) {
  if (!ok) throw std::invalid_argument(std::string(who) + ": step plan: " + what);
}

// A sequence's tree masks: all zero (causal rows) or a tree as StepPlan::tree_masks says.
void validate_tree(const StepPlan& plan, const SeqInStep& s, const char* who) {
  const uint64_t* m = plan.tree_masks.data() + s.first_token;
  bool any = false;
  for (int32_t j = 0; j < s.n_tokens; ++j) any = any || m[j] != 0;
  if (!any) return;
  require(s.n_tokens <= StepPlan::kMaxTreeTokens, who, "a token tree has more than 64 rows");
  for (int32_t j = 0; j < s.n_tokens; ++j) {
    const uint64_t own = uint64_t{1} << j;
    require((m[j] & own) != 0 && (m[j] >> j) == 1, who, "a tree row's mask must hold itself and earlier rows only");
    const uint64_t ancestors = m[j] & ~own;
    require(j == 0 ? ancestors == 0 : ancestors != 0, who, "a tree has one root, its first row");
    if (j > 0) {
      const int parent = 63 - std::countl_zero(ancestors);
      require(m[parent] == ancestors, who, "a tree row's mask must be its parent's plus itself");
    }
    require(plan.positions[static_cast<size_t>(s.first_token + j)] == s.n_past + std::popcount(m[j]) - 1, who,
            "a tree row's position must be n_past + its depth");
  }
}

}  // namespace

std::vector<int32_t> tree_path(const StepPlan& plan, int32_t t) {
  const SeqInStep& s = plan.seqs[static_cast<size_t>(plan.token_seq[static_cast<size_t>(t)])];
  std::vector<int32_t> path;
  for (uint64_t m = plan.tree_masks[static_cast<size_t>(t)]; m != 0; m &= m - 1)
    path.push_back(s.first_token + std::countr_zero(m));
  return path;
}

void validate_step_plan(const StepPlan& plan, int num_blocks, int block_size, const char* who) {
  const size_t n = plan.tokens.size();
  require(plan.positions.size() == n && plan.slots.size() == n && plan.token_seq.size() == n, who,
          "tokens, positions, slots and token_seq differ in length");
  const int64_t n_slots = static_cast<int64_t>(num_blocks) * block_size;
  // -1: a block released behind a sliding window (KvCacheManager::kHole), which no row reads.
  const auto block_ok = [&](int32_t b) { return b >= -1 && b < num_blocks; };
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const auto& s = plan.seqs[si];
    require(s.block_table_offset >= 0 && s.n_blocks >= 0 &&
                static_cast<size_t>(s.block_table_offset) + s.n_blocks <= plan.block_tables.size(),
            who, "a block table lies outside block_tables");
    for (int32_t i = 0; i < s.n_blocks; ++i)
      require(block_ok(plan.block_tables[static_cast<size_t>(s.block_table_offset + i)]), who,
              "block id out of range");
    require(s.n_tokens >= 0 && s.first_token >= 0 && static_cast<size_t>(s.first_token) + s.n_tokens <= n,
            who, "a sequence's tokens lie outside the token list");
    for (int32_t t = s.first_token; t < s.first_token + s.n_tokens; ++t)
      require(plan.token_seq[static_cast<size_t>(t)] == static_cast<int32_t>(si), who,
              "a sequence's tokens are not contiguous in the token list");
  }
  for (size_t t = 0; t < n; ++t) {
    require(plan.slots[t] >= 0 && plan.slots[t] < n_slots, who, "slot out of range");
    require(plan.token_seq[t] >= 0 && static_cast<size_t>(plan.token_seq[t]) < plan.seqs.size(), who,
            "token_seq out of range");
    const auto& s = plan.seqs[static_cast<size_t>(plan.token_seq[t])];
    require(plan.positions[t] >= 0 &&
                static_cast<int64_t>(plan.positions[t]) < static_cast<int64_t>(s.n_blocks) * block_size,
            who, "position beyond its sequence's block table");
  }
  for (int32_t r : plan.logit_rows)
    require(r >= 0 && static_cast<size_t>(r) < n, who, "logit row out of range");
  require(plan.tree_masks.empty() || plan.tree_masks.size() == n, who, "tree_masks must be empty or one per token");
  if (!plan.tree_masks.empty())
    for (const auto& s : plan.seqs) validate_tree(plan, s, who);
  for (const auto& c : plan.slot_copies)
    require(c.src >= 0 && c.src < n_slots && c.dst >= 0 && c.dst < n_slots && c.src != c.dst, who,
            "slot copy out of range");
  for (const auto& c : plan.block_copies)
    require(block_ok(c.src) && block_ok(c.dst) && c.src != c.dst, who, "block copy id out of range");
  for (const auto& s : plan.k_shifts) require(block_ok(s.block), who, "K-shift block out of range");
}

}  // namespace pagoda
