// The scheduler's part in speculative decoding (scheduler.h, speculative.h): drafting a
// decoding sequence's tree within the step's budgets, emitting its rows, and taking the
// accepted path after the forward pass.
#include <algorithm>
#include <stdexcept>

#include "engine/kv/block_math.h"
#include "engine/scheduler/scheduler.h"
#include "engine/speculative/spec_cost.h"

namespace pagoda {

DraftTree Scheduler::draft_for(Sequence& seq, int budget) {
  DraftTree root(seq.tokens.back());
  // The first token (a prompt cut just before its end, siblings about to fork) is never drafted.
  if (!cfg_.draft || cfg_.spec_tokens <= 0 || !seq.speculate || seq.output.empty()) return root;
  const int room = std::min({cfg_.spec_tokens, spec_pool_, budget - 1, cfg_.ctx_limit - seq.num_computed - 1,
                             StepPlan::kMaxTreeTokens - 1});
  if (room <= 0 || !seq.spec.allowed()) return root;
  int worth = drafts_worth(seq, room);
  if (worth > 0) {
    seq.spec.gated = 0;
  } else if (seq.spec.probe_despite_cost()) {
    worth = room;
  } else {
    ++counters_.spec_cost_skips;
    return root;
  }
  DraftTree tree = cfg_.draft(seq, worth);
  if (tree.drafted() == 0) return root;
  if (!tree.valid() || tree.tokens[0] != root.tokens[0] || tree.drafted() > worth)
    throw std::logic_error("scheduler: the drafter returned a malformed tree");
  spec_pool_ -= tree.drafted();
  return tree;
}

void Scheduler::plan_spec_cost() {
  spec_share_ms_ = -1;
  const StepCostModel* cost = cfg_.step_cost;
  if (!cfg_.spec_cost_gate || !cost || !cost->ready()) return;
  spec_decodes_ = StepFeatures{};
  int n = 0;
  for (const auto& seq : running_)
    if (seq->status == SeqStatus::Running && seq->num_tokens() - seq->num_computed == 1)
      spec_decodes_.add_chunk(seq->num_computed, 1, 1), ++n;
  if (n == 0) return;
  spec_decodes_ms_ = cost->predict_ms(spec_decodes_);
  spec_share_ms_ = spec_decodes_ms_ / n;
}

int Scheduler::drafts_worth(const Sequence& seq, int room) {
  if (spec_share_ms_ < 0) return room;
  DraftCostInputs in;
  in.acceptance = seq.spec.acceptance;
  in.token_share_ms = spec_share_ms_;
  in.max_draft = room;
  // The drafted nodes join the step after the root, as plain rows with logits.
  return drafts_worth_cost(in, [&](int k) {
    StepFeatures f = spec_decodes_;
    f.add_chunk(seq.num_computed + 1, k, k);
    return cfg_.step_cost->predict_ms(f) - spec_decodes_ms_;
  });
}

void Scheduler::emit_tree(StepPlan& plan, const std::shared_ptr<Sequence>& seq,
                          std::shared_ptr<const DraftTree> tree) {
  const int B = kv_.block_size();
  const auto& table = kv_.block_table(seq->id);
  const int T = tree->size();
  SeqInStep s = open_seq_in_step(plan, *seq, T);
  plan.tree_masks.resize(plan.tokens.size(), 0);
  const std::vector<uint64_t> masks = tree->masks();
  const int seq_index = static_cast<int>(plan.seqs.size());
  // Node j is written at logical index n_past + j and roped at n_past + its depth.
  for (int j = 0; j < T; ++j) {
    const int index = s.n_past + j;
    plan.tokens.push_back(tree->tokens[static_cast<size_t>(j)]);
    plan.positions.push_back(s.n_past + tree->depth(j));
    plan.slots.push_back(table[static_cast<size_t>(index / B)] * B + index % B);
    plan.token_seq.push_back(seq_index);
    plan.tree_masks.push_back(masks[static_cast<size_t>(j)]);
  }
  plan.seqs.push_back(s);
  SampleTarget target;
  target.logit_row = static_cast<int>(plan.logit_rows.size());
  target.seq = seq;
  target.tree = std::move(tree);
  for (int j = 0; j < T; ++j) plan.logit_rows.push_back(s.first_token + j);
  targets_.push_back(std::move(target));
  step_features_.add_chunk(s.n_past, T, T);
  scheduled_.push_back({seq, T, false, true});
}

int Scheduler::take_tree_tokens(const SampleTarget& t, const std::vector<int32_t>& emitted) {
  const std::shared_ptr<Sequence>& seq = t.seq;
  const DraftTree& tree = *t.tree;
  const std::vector<int> path = accepted_nodes(tree, emitted);
  const int n_past = seq->num_computed;
  const int accepted = static_cast<int>(path.size()) - 1;
  // The accepted drafts join the cache's tokens; the last emitted token is the next root.
  for (int d = 1; d <= accepted; ++d) seq->tokens.push_back(tree.tokens[static_cast<size_t>(path[static_cast<size_t>(d)])]);
  kv_.keep_tree_path(seq->id, n_past, path);
  seq->num_computed = n_past + static_cast<int>(path.size());
  kv_.commit(seq->id, seq->tokens, seq->num_computed);
  release_behind_window(*seq);
  ++counters_.spec_verifications;
  counters_.spec_drafted += static_cast<uint64_t>(tree.drafted());
  counters_.spec_accepted += static_cast<uint64_t>(accepted);
  int depth = 0;
  for (int j = 0; j < tree.size(); ++j) depth = std::max(depth, tree.depth(j));
  seq->spec.observe(depth, accepted);
  seq->spec.drafted_total += tree.drafted();
  seq->spec.accepted_total += accepted;
  // Token by token, as plain decoding would have taken them (the stop rules see the cache
  // length each token had).
  const int final_computed = seq->num_computed;
  for (size_t i = 0; i < emitted.size(); ++i) {
    seq->num_computed = n_past + 1 + static_cast<int>(i);
    if (i + 1 == emitted.size()) seq->tokens.push_back(emitted[i]);
    if (!take_token(seq, emitted[i])) return static_cast<int>(i) + 1;
  }
  seq->num_computed = final_computed;
  return static_cast<int>(emitted.size());
}

}  // namespace pagoda
