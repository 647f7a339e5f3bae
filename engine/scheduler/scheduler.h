// Scheduler: token-budget continuous batching over the paged KV cache (docs/architecture.md).
//
// Each step, within `max_batch_tokens` tokens and `max_seqs` running sequences:
//   1. one decode token for every running sequence (oldest admitted first),
//   2. the next chunk of every running sequence still prefilling,
//   3. new (or preempted) sequences from the waiting queue, first come first served, each as
//      long a chunk as the budget allows.
// Stall-free prefill: in a step that carries decodes, prefill chunks (2 and 3) are also cut so
// that the step's predicted time (StepCostModel) stays within a target, so a long prompt never
// stretches the decoding streams' inter-token gap; the first prefill of such a step always gets
// at least min_prefill_chunk tokens, so prompts keep moving. Such a step also takes at most
// twice the prefill tokens of the step before (a slow start: the cost model sees each size
// before it is doubled, so one bad prediction cannot make a long stall). Steps without decodes
// use the whole token budget.
// When a running sequence needs a block and none is free, the most recently admitted running
// sequence not yet scheduled this step is preempted: it drops its blocks (full ones stay in the
// prefix cache) and goes back to the front of the queue, to resume by recompute. No new
// sequence is admitted in a step that preempted.
//
// The scheduler owns sequence bookkeeping only: schedule() emits a plain StepPlan, the caller
// runs the model and samples one token per sample target, and update() consumes those tokens,
// applies the token-level stop rules (EOS/EOG, stop token ids, max_tokens, context limit) and
// frees finished sequences at once. Stop strings are the caller's (it needs text): it ends a
// sequence with finish().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/scheduler/sequence.h"
#include "engine/scheduler/step_cost.h"
#include "engine/backend/step_plan.h"

namespace pagoda {

struct SchedulerConfig {
  int max_batch_tokens = 512;  // tokens per step (prefill chunks + decodes)
  int max_seqs = 16;           // running sequences at most
  int ctx_limit = 4096;        // tokens a sequence may hold in the cache
  bool context_shift = true;   // at the limit: shift (true) or finish with "length" (false)
  std::function<bool(int32_t)> is_eog;  // end-of-generation tokens (EOS, EOT, ...); may be empty
  // Stall-free prefill. The target time of a step that carries decodes: max_step_ms when > 0;
  // when 0, auto_step_factor x the predicted time of its decodes alone; < 0: no target.
  double max_step_ms = 0;
  // The trade: the streams' gaps grow about this much while a prompt is prefilled,
  // and the prompt gets (factor - 1) / factor of each step, so its TTFT is about
  // factor / (factor - 1) times the unprotected one (1.5: 3x; 1.75: 2.3x; 2: 2x). 1.75 keeps the
  // gap growth under 2x with a margin for misprediction.
  double auto_step_factor = 1.75;
  int min_prefill_chunk = 4;   // prefill tokens such a step still takes (progress)
  const StepCostModel* step_cost = nullptr;  // not owned; null or not ready(): no target
  // Speculative decoding (speculative.h): a sequence with `speculate` set verifies a draft tree
  // in its decode step. draft(seq, max_draft) proposes one (at most max_draft drafted nodes;
  // the root only: a plain decode). Drafted tokens share the step's token budget; a step's
  // total stays within spec_step_tokens (a batch whose decodes alone reach it is compute-bound
  // enough that verifying more tokens costs more than it saves, so no one drafts).
  std::function<DraftTree(const Sequence&, int max_draft)> draft;
  int spec_tokens = 0;        // drafted nodes per sequence and step at most (0: off)
  int spec_step_tokens = 32;
  // With a ready step_cost: each speculating decode drafts only as many tokens as the cost
  // model says pay for themselves (spec_cost.h); spec_step_tokens stays the upper bound.
  bool spec_cost_gate = true;
};

// Row `logit_row` (an index into StepPlan::logit_rows) is sampled for `seq`. n > 1 siblings that
// fork this step share their first sibling's row.
struct SampleTarget {
  int logit_row = 0;
  std::shared_ptr<Sequence> seq;
  std::shared_ptr<Sequence> fork_from;  // set when seq forks from this sequence on update
  // A draft tree being verified: rows logit_row .. logit_row + tree->size() - 1 are its nodes'.
  std::shared_ptr<const DraftTree> tree;
};

// Prompt logprobs (GenerationRequest::prompt_logprobs >= 0): logit rows [first_row, first_row + n)
// of the step (indices into StepPlan::logit_rows, never shared with a sample target) hold the
// logits at positions first_position .. first_position + n - 1 of `seq`, which score its prompt
// tokens first_position + 1 .. first_position + n.
struct PromptLogprobRows {
  std::shared_ptr<Sequence> seq;
  int first_row = 0;
  int first_position = 0;
  int n = 0;
};

// Embedding requests: hidden rows [first_row, first_row + n) of the step (indices into
// StepPlan::hidden_rows) hold the final-norm states of positions first_position .. + n - 1 of
// `seq`, the positions its pooling reads (embedding_pool.h).
struct HiddenRows {
  std::shared_ptr<Sequence> seq;
  int first_row = 0;
  int first_position = 0;
  int n = 0;
};

// One step as the scheduler formed it, a plain value: the plan for the backend and, each with
// its rows, what to sample after the forward pass (in order), the prompt-logprob rows and the
// hidden rows. Scheduler::take_emitted consumes its targets' tokens.
struct ScheduledStep {
  StepPlan plan;
  std::vector<SampleTarget> targets;
  std::vector<PromptLogprobRows> prompt_rows;
  std::vector<HiddenRows> hidden_rows;
};

struct SchedulerCounters {
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0;           // prompt tokens of admitted requests (first admission)
  uint64_t prompt_tokens_cached = 0;    // of those, served from the prefix cache
  uint64_t prefill_tokens_computed = 0; // prefill work actually done (includes recompute)
  uint64_t generation_tokens = 0;
  uint64_t context_shifts = 0;
  uint64_t spec_verifications = 0;  // decode steps that verified a draft tree
  uint64_t spec_drafted = 0;        // drafted tree nodes
  uint64_t spec_accepted = 0;       // of those, accepted
  uint64_t spec_cost_skips = 0;     // speculating decodes the cost gate kept from drafting
  uint64_t forced_tokens = 0;       // tokens a target took after its sampled one (no decode step each)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig cfg, KvCacheManager& kv);

  const SchedulerConfig& config() const { return cfg_; }

  // Queues a sequence (choice 0 of its request; its siblings, if any, are in seq->siblings with
  // status PendingFork). Validation (length, capacity) is the caller's.
  void add(std::shared_ptr<Sequence> seq);

  // Forms the next step (its plan empty when there is nothing to run).
  ScheduledStep next_step();
  // next_step()'s plan alone, the rest read through the three accessors below.
  StepPlan schedule();
  // What to sample after the forward pass of the last schedule(), in order.
  const std::vector<SampleTarget>& sample_targets() const { return targets_; }
  // The prompt-logprob rows of the last schedule(). Every prompt position a request needs is
  // listed exactly once over its steps (chunks, preemption and recompute included): such a
  // request takes nothing from the prefix cache for positions not yet reported.
  const std::vector<PromptLogprobRows>& prompt_logprob_rows() const { return prompt_rows_; }
  // The hidden rows of the last schedule(): every position an embedding request pools is
  // listed exactly once over its steps. An embedding sequence samples nothing; once its prompt
  // is computed it finishes with Stop (its full blocks stay in the prefix cache).
  const std::vector<HiddenRows>& hidden_rows() const { return hidden_rows_; }
  // Consumes one sampled token per sample target (same order). Returns the sequences that got a
  // token, in target order; those whose token ended them are already finished.
  std::vector<std::shared_ptr<Sequence>> update(const std::vector<int32_t>& sampled);
  // The same with the tokens each target emitted: for a plain target its sampled token, then
  // any the grammar forced after it (forced_tokens.h: computed in its next step as one chunk
  // of the decode pass, see Sequence::forced_tail); for a tree target
  // its accepted drafts then the token drawn after them (speculative.h). A sequence is in the
  // result once per token it took (consecutively); tokens after one that ended it are dropped.
  std::vector<std::shared_ptr<Sequence>> update_emitted(const std::vector<std::vector<int32_t>>& emitted);
  // The same, answering per target (same order) how many of its emitted tokens its sequence
  // took: 0 when it was no longer running, fewer than emitted when a token ended it.
  std::vector<int> take_emitted(const std::vector<std::vector<int32_t>>& emitted);

  // Ends a sequence in any state (abort, stop string, error) and frees its blocks now. On an
  // already finished sequence only the reason changes. Pending siblings end with it.
  void finish(const std::shared_ptr<Sequence>& seq, FinishReason reason, const std::string& error = "");

  // Sequences finished since the last call (by update(), finish() or the scheduler itself).
  std::vector<std::shared_ptr<Sequence>> take_finished();

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Scheduled {
    std::shared_ptr<Sequence> seq;
    int n_tokens = 0;
    bool prefill = false;
    bool tree = false;  // a draft tree: bookkeeping waits for the accepted path (update)
  };

  bool is_scheduled(const Sequence& seq) const;
  // Makes room for n tokens of a running sequence, preempting others if needed. False when the
  // sequence itself was preempted or finished instead.
  bool reserve_running(const std::shared_ptr<Sequence>& seq, int n);
  // At the context limit: shifts the sequence's cache (or finishes it). False if finished.
  bool shift_context(const std::shared_ptr<Sequence>& seq);
  // Drops tokens of a sequence with no blocks so it fits the context again (resume after a
  // preemption at the limit). False when it cannot (then it ends with "length").
  bool shift_tokens(Sequence& seq);
  void preempt(const std::shared_ptr<Sequence>& seq);
  // A SeqInStep for the next n tokens of `seq` (from its num_computed on), its block-table
  // slice appended to the plan; the caller adds the tokens and pushes it.
  SeqInStep open_seq_in_step(StepPlan& plan, const Sequence& seq, int n) const;
  // `prefill`: the chunk counts as prefill work (counters, prompt logprob rows, the slow start),
  // a recompute's generated tokens too; SeqInStep::prefill is the rows' kind (output_begin).
  void emit(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int n, bool prefill);
  // Tokens seq's next chunk may take at most: up to its output_begin while it computes prompt
  // tokens, to its end after that. A chunk never holds both kinds of rows.
  static int chunk_room(const Sequence& seq);
  // Speculative decoding (scheduler_spec.cpp): the draft tree of a decoding sequence (root only
  // when it does not speculate this step), and its rows in the plan.
  DraftTree draft_for(Sequence& seq, int budget);
  // At the start of a step: the decodes' predicted time and each one's share (spec_cost.h).
  void plan_spec_cost();
  // The cost gate's limit on `seq`'s drafts (room when there is no gate this step).
  int drafts_worth(const Sequence& seq, int room);
  void emit_tree(StepPlan& plan, const std::shared_ptr<Sequence>& seq, std::shared_ptr<const DraftTree> tree);
  // After the forward pass: keeps the accepted path of a verified tree and takes its tokens;
  // returns how many it took.
  int take_tree_tokens(const SampleTarget& t, const std::vector<int32_t>& emitted);
  // Appends one generated token and applies the token stops; false when it ended the sequence.
  bool take_token(const std::shared_ptr<Sequence>& seq, int32_t token);
  // After a step: drops the blocks behind the sliding window (KvCacheManager::set_window).
  void release_behind_window(const Sequence& seq);
  // After the decodes are in: the time target for the rest of the step (< 0: none).
  double prefill_target_ms() const;
  // The longest prefill chunk of at most n tokens of `seq` (from seq->num_computed) that keeps
  // the step within target_ms_ (n when there is no target).
  int fit_prefill(const Sequence& seq, int n) const;
  // Adds the prompt-logprob rows of `seq` among its n tokens starting at plan index `first`.
  void emit_prompt_logprob_rows(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int first, int n);
  // Adds the hidden rows an embedding sequence pools among its n tokens at plan index `first`.
  void emit_hidden_rows(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int first, int n);
  void remove_running(const Sequence& seq);
  // Admits the front of the queue (or ends it when it can never run again). False when it
  // has to wait.
  bool try_admit(StepPlan& plan, int& budget);
  void fork_sibling(const std::shared_ptr<Sequence>& parent, const std::shared_ptr<Sequence>& child);
  FinishReason stop_reason(const Sequence& seq, int32_t token) const;

  SchedulerConfig cfg_;
  KvCacheManager& kv_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order, oldest first
  std::vector<Scheduled> scheduled_;
  std::vector<SampleTarget> targets_;
  std::vector<PromptLogprobRows> prompt_rows_;
  std::vector<HiddenRows> hidden_rows_;
  std::vector<std::shared_ptr<Sequence>> finished_;
  SchedulerCounters counters_;
  StepFeatures step_features_;  // of the step being formed
  double target_ms_ = -1;       // its time target (< 0: none)
  int prefill_tokens_in_step_ = 0;
  int last_step_prefill_ = 0;   // prefill tokens of the last step (the slow start's base)
  int spec_pool_ = 0;           // drafted tokens the step being formed may still take
  StepFeatures spec_decodes_;   // the step's decodes alone, as plan_spec_cost() saw them
  double spec_decodes_ms_ = 0;  // ... their predicted time
  double spec_share_ms_ = -1;   // ... over the sequences decoding (< 0: no cost gate)
};

}  // namespace pagoda
