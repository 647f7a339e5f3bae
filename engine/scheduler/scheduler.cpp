#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "engine/kv/block_math.h"
#include "engine/sampling/embedding_pool.h"

namespace pagoda {

namespace {
// Whether `seq` still needs the logits of some prompt position (see PromptLogprobRows). The
// positions are prompt indices only while nothing was shifted out.
bool wants_prompt_logprobs(const Sequence& seq) {
  return seq.sample && seq.request && seq.request->prompt_logprobs >= 0 && seq.n_shifts == 0 &&
         seq.prompt_logprob_rows_done < seq.prompt_len() - 1;
}
// The prompt positions an embedding sequence still has to pool ([lo, hi) empty: none or not one).
PoolPositions positions_to_pool(const Sequence& seq) {
  if (!seq.request || !seq.request->embed) return {0, 0};
  PoolPositions p = pool_positions(seq.request->pooling, seq.prompt_len());
  p.lo = std::max(p.lo, static_cast<int>(seq.pooled_upto));
  return p;
}

// The prompt positions [lo, hi) whose logprob rows a chunk of n tokens of `seq` (from
// num_computed) covers; empty when none. Positions 0 .. prompt_len - 2 score the next prompt
// token; the last one is the sample row.
std::pair<int, int> prompt_logprob_positions(const Sequence& seq, int n) {
  if (!wants_prompt_logprobs(seq)) return {0, 0};
  return {std::max(seq.num_computed, seq.prompt_logprob_rows_done),
          std::min(seq.num_computed + n, seq.prompt_len() - 1)};
}

// Logit rows a chunk of n tokens of `seq` (from num_computed) adds: the sampled row when it
// completes the sequence's tokens, and the prompt-logprob rows it covers.
int chunk_logit_rows(const Sequence& seq, int n) {
  const auto [lo, hi] = prompt_logprob_positions(seq, n);
  return (seq.sample && seq.num_computed + n == seq.num_tokens() ? 1 : 0) + std::max(0, hi - lo);
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig cfg, KvCacheManager& kv) : cfg_(std::move(cfg)), kv_(kv) {
  if (cfg_.max_batch_tokens <= 0) throw std::invalid_argument("scheduler: max_batch_tokens must be positive");
  if (cfg_.max_seqs <= 0) throw std::invalid_argument("scheduler: max_seqs must be positive");
  if (cfg_.ctx_limit <= kv_.block_size())
    throw std::invalid_argument("scheduler: the context limit must exceed one block");
  if (cfg_.min_prefill_chunk <= 0) throw std::invalid_argument("scheduler: min_prefill_chunk must be positive");
  if (!(cfg_.auto_step_factor >= 1)) throw std::invalid_argument("scheduler: auto_step_factor must be at least 1");
}

void Scheduler::add(std::shared_ptr<Sequence> seq) {
  seq->status = SeqStatus::Waiting;
  waiting_.push_back(std::move(seq));
}

bool Scheduler::is_scheduled(const Sequence& seq) const {
  for (const auto& s : scheduled_)
    if (s.seq.get() == &seq) return true;
  return false;
}

void Scheduler::remove_running(const Sequence& seq) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &seq; });
  if (it != running_.end()) running_.erase(it);
}

void Scheduler::preempt(const std::shared_ptr<Sequence>& seq) {
  kv_.free(seq->id);
  seq->num_computed = 0;
  seq->forced_tail = 0;  // recomputed from the start: a prefill
  seq->status = SeqStatus::Waiting;
  remove_running(*seq);
  waiting_.push_front(seq);
  ++counters_.preemptions;
}

bool Scheduler::reserve_running(const std::shared_ptr<Sequence>& seq, int n) {
  while (!kv_.allocate(seq->id, seq->num_computed, n)) {
    // The newest running sequence not yet in this step (never one already scheduled: its
    // cache edits and slots are part of the plan).
    std::shared_ptr<Sequence> victim;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if (*it != seq && !is_scheduled(**it)) {
        victim = *it;
        break;
      }
    }
    if (victim) {
      preempt(victim);
      continue;
    }
    if (!scheduled_.empty()) {
      preempt(seq);  // the sequences scheduled this step hold the blocks; retry later
    } else {
      // Alone and still no room: the cache is smaller than this sequence needs.
      finish(seq, FinishReason::Length);
    }
    return false;
  }
  return true;
}

bool Scheduler::shift_context(const std::shared_ptr<Sequence>& seq) {
  const int B = kv_.block_size();
  if (cfg_.context_shift) {
    const auto [n_keep, n_discard] = context_shift_cut(seq->num_computed, seq->n_keep, B);
    if (n_discard >= B && kv_.shift(seq->id, seq->num_computed, n_keep, n_discard)) {
      seq->tokens.erase(seq->tokens.begin() + n_keep, seq->tokens.begin() + n_keep + n_discard);
      seq->num_computed -= n_discard;
      ++seq->n_shifts;
      ++counters_.context_shifts;
      return true;
    }
  }
  finish(seq, FinishReason::Length);
  return false;
}

bool Scheduler::shift_tokens(Sequence& seq) {
  const int B = kv_.block_size();
  while (seq.num_tokens() > cfg_.ctx_limit) {
    // The same cut shift_context() makes, on tokens that are not in the cache yet.
    const auto [n_keep, n_discard] = context_shift_cut(seq.num_tokens() - 1, seq.n_keep, B);
    if (!cfg_.context_shift || n_discard < B) return false;
    seq.tokens.erase(seq.tokens.begin() + n_keep, seq.tokens.begin() + n_keep + n_discard);
    ++seq.n_shifts;
    ++counters_.context_shifts;
  }
  return true;
}

SeqInStep Scheduler::open_seq_in_step(StepPlan& plan, const Sequence& seq, int n) const {
  const auto& table = kv_.block_table(seq.id);
  SeqInStep s;
  s.seq_id = seq.id;
  s.first_token = plan.n_tokens();
  s.n_tokens = n;
  s.n_past = seq.num_computed;
  s.block_table_offset = static_cast<int32_t>(plan.block_tables.size());
  s.n_blocks = ceil_div(seq.num_computed + n, kv_.block_size());
  s.lora = seq.lora_slot;
  plan.block_tables.insert(plan.block_tables.end(), table.begin(), table.begin() + s.n_blocks);
  return s;
}

void Scheduler::emit(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int n, bool prefill) {
  const int B = kv_.block_size();
  const auto& table = kv_.block_table(seq->id);
  SeqInStep s = open_seq_in_step(plan, *seq, n);
  // The rows' kind follows the tokens (chunk_room keeps a chunk on one side of output_begin),
  // not the work's: a recompute's generated tokens are decode rows, as they were at first.
  s.prefill = seq->num_computed < seq->output_begin();
  const int seq_index = static_cast<int>(plan.seqs.size());
  const size_t rows_before = plan.logit_rows.size();
  for (int i = 0; i < n; ++i) {
    const int pos = seq->num_computed + i;
    plan.tokens.push_back(seq->tokens[pos]);
    plan.positions.push_back(pos);
    plan.slots.push_back(table[pos / B] * B + pos % B);
    plan.token_seq.push_back(seq_index);
  }
  plan.seqs.push_back(s);
  if (plan.has_tree()) plan.tree_masks.resize(plan.tokens.size(), 0);
  if (seq->sample && seq->num_computed + n == seq->num_tokens()) {
    const int row = static_cast<int>(plan.logit_rows.size());
    plan.logit_rows.push_back(s.first_token + n - 1);
    targets_.push_back({row, seq, nullptr});
    for (const auto& sib : seq->siblings)
      if (sib->status == SeqStatus::PendingFork) targets_.push_back({row, sib, seq});
  }
  if (prefill) emit_prompt_logprob_rows(plan, seq, s.first_token, n);
  // (Also a "decode": a chunk can leave an embedding's prompt one token short.)
  emit_hidden_rows(plan, seq, s.first_token, n);
  const size_t rows_after = plan.logit_rows.size();
  step_features_.add_chunk(s.n_past, n, static_cast<int>(rows_after - rows_before));
  if (prefill) prefill_tokens_in_step_ += n;
  scheduled_.push_back({seq, n, prefill});
}

void Scheduler::emit_prompt_logprob_rows(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int first, int n) {
  const auto [lo, hi] = prompt_logprob_positions(*seq, n);
  if (lo >= hi) return;
  PromptLogprobRows r;
  r.seq = seq;
  r.first_row = static_cast<int>(plan.logit_rows.size());
  r.first_position = lo;
  r.n = hi - lo;
  for (int pos = lo; pos < hi; ++pos) plan.logit_rows.push_back(first + (pos - seq->num_computed));
  prompt_rows_.push_back(std::move(r));
}

void Scheduler::emit_hidden_rows(StepPlan& plan, const std::shared_ptr<Sequence>& seq, int first, int n) {
  const PoolPositions want = positions_to_pool(*seq);
  const int lo = std::max(seq->num_computed, want.lo);
  const int hi = std::min(seq->num_computed + n, want.hi);
  if (lo >= hi) return;
  HiddenRows r;
  r.seq = seq;
  r.first_row = static_cast<int>(plan.hidden_rows.size());
  r.first_position = lo;
  r.n = hi - lo;
  for (int pos = lo; pos < hi; ++pos) plan.hidden_rows.push_back(first + (pos - seq->num_computed));
  hidden_rows_.push_back(std::move(r));
}

double Scheduler::prefill_target_ms() const {
  const StepCostModel* cost = cfg_.step_cost;
  if (cfg_.max_step_ms < 0 || !cost || !cost->ready() || scheduled_.empty()) return -1;  // no decodes
  if (cfg_.max_step_ms > 0) return cfg_.max_step_ms;
  return cfg_.auto_step_factor * cost->predict_ms(step_features_);
}

int Scheduler::chunk_room(const Sequence& seq) {
  const int end = seq.num_computed < seq.output_begin() ? seq.output_begin() : seq.num_tokens();
  return end - seq.num_computed;
}

int Scheduler::fit_prefill(const Sequence& seq, int n) const {
  if (target_ms_ < 0 || n <= 0) return n;
  auto fits = [&](int k) {
    StepFeatures f = step_features_;
    f.add_chunk(seq.num_computed, k, chunk_logit_rows(seq, k));
    return cfg_.step_cost->predict_ms(f) <= target_ms_;
  };
  // The predicted time grows with k (non-negative coefficients): binary search the longest fit.
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  lo = std::min(lo, std::max(cfg_.min_prefill_chunk, 2 * last_step_prefill_) - prefill_tokens_in_step_);
  if (prefill_tokens_in_step_ == 0) lo = std::max(lo, std::min(n, cfg_.min_prefill_chunk));
  return std::max(lo, 0);
}

bool Scheduler::try_admit(StepPlan& plan, int& budget) {
  const std::shared_ptr<Sequence> seq = waiting_.front();
  int group = 1;
  for (const auto& sib : seq->siblings)
    if (sib->status == SeqStatus::PendingFork) ++group;
  if (!running_.empty() && static_cast<int>(running_.size()) + group > cfg_.max_seqs) return false;

  if (!shift_tokens(*seq)) {
    finish(seq, FinishReason::Length);  // leaves the queue: the caller moves on
    return true;
  }
  const bool first_admission = seq->cached_prompt_tokens < 0;
  // A request for prompt logprobs needs the logits of every prompt position not yet reported,
  // so it shares cached blocks only up to there.
  // An embedding request likewise shares them only up to the first position it still pools.
  int match_limit = wants_prompt_logprobs(*seq)
                        ? std::min(seq->num_tokens() - 1, static_cast<int>(seq->prompt_logprob_rows_done))
                        : seq->num_tokens() - 1;
  if (const PoolPositions pool = positions_to_pool(*seq); pool.lo < pool.hi)
    match_limit = std::min(match_limit, pool.lo);
  const int matched = kv_.match_prefix(seq->id, seq->tokens, match_limit, seq->lora_key);
  seq->num_computed = matched;
  const int n = fit_prefill(*seq, std::min(chunk_room(*seq), budget));
  if (n == 0 || !kv_.allocate(seq->id, matched, n)) {
    kv_.free(seq->id);
    seq->num_computed = 0;
    return false;
  }
  if (first_admission) {
    seq->cached_prompt_tokens = std::min(matched, seq->prompt_len());
    counters_.prompt_tokens += seq->prompt_len();
    counters_.prompt_tokens_cached += seq->cached_prompt_tokens;
  }
  waiting_.pop_front();
  seq->status = SeqStatus::Running;
  running_.push_back(seq);
  emit(plan, seq, n, true);
  budget -= n;
  return true;
}

ScheduledStep Scheduler::next_step() {
  ScheduledStep step;
  step.plan = schedule();
  step.targets = targets_;
  step.prompt_rows = prompt_rows_;
  step.hidden_rows = hidden_rows_;
  return step;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  scheduled_.clear();
  targets_.clear();
  prompt_rows_.clear();
  hidden_rows_.clear();
  int budget = cfg_.max_batch_tokens;
  const uint64_t preemptions_before = counters_.preemptions;
  step_features_ = StepFeatures{};
  target_ms_ = -1;
  prefill_tokens_in_step_ = 0;
  int n_decoding = 0;
  for (const auto& seq : running_) n_decoding += seq->num_tokens() - seq->num_computed == 1 ? 1 : 0;
  spec_pool_ = std::max(0, std::min(budget, cfg_.spec_step_tokens) - n_decoding);
  if (cfg_.draft) plan_spec_cost();

  // Decodes first, then unfinished prefills; both in admission order. Iterate over a snapshot:
  // preemption and finishing edit running_.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) target_ms_ = prefill_target_ms();
    const auto snapshot = running_;
    for (const auto& seq : snapshot) {
      if (budget == 0) break;
      if (seq->status != SeqStatus::Running || is_scheduled(*seq)) continue;
      const int remaining = seq->num_tokens() - seq->num_computed;
      // A sampled token with the tokens the grammar forced after it is a decode too.
      const bool decode = remaining == 1 || (seq->forced_tail > 0 && remaining == seq->forced_tail + 1);
      if (decode != (pass == 0)) continue;
      int n = std::min(chunk_room(*seq), budget);
      if (seq->num_computed + n > cfg_.ctx_limit) {
        if (decode) {
          if (!shift_context(seq)) continue;
        } else {
          n = cfg_.ctx_limit - seq->num_computed;  // cannot happen: prompts fit the context
          if (n <= 0) { finish(seq, FinishReason::Length); continue; }
        }
      }
      if (decode && remaining == 1 && cfg_.draft) {  // no drafter: no tree to build (and allocate) per decode
        // Drafts never preempt anyone: without free blocks for the tree, a plain decode.
        DraftTree tree = draft_for(*seq, budget);
        if (tree.drafted() > 0 &&
            kv_.blocks_needed(seq->id, seq->num_computed, tree.size()) <= kv_.pool().num_available()) {
          const int t = tree.size();
          if (!reserve_running(seq, t)) continue;
          emit_tree(plan, seq, std::make_shared<const DraftTree>(std::move(tree)));
          budget -= t;
          continue;
        }
      }
      if (!decode && (n = fit_prefill(*seq, n)) == 0) continue;
      if (!reserve_running(seq, n)) continue;
      // A prompt cut just before its last token finishes in the decode pass; it is still prefill.
      emit(plan, seq, n, !decode || seq->output.empty());
      budget -= n;
    }
  }

  if (counters_.preemptions == preemptions_before) {
    while (!waiting_.empty() && budget > 0) {
      if (!try_admit(plan, budget)) {
        if (running_.empty()) {
          // Nothing else holds blocks, yet it does not fit: it never will.
          finish(waiting_.front(), FinishReason::Error, "the request does not fit in the KV cache");
          continue;
        }
        break;
      }
    }
  }
  kv_.take_slot_copies(plan.slot_copies);
  kv_.take_edits(plan.block_copies, plan.k_shifts);
  last_step_prefill_ = prefill_tokens_in_step_;
  return plan;
}

void Scheduler::fork_sibling(const std::shared_ptr<Sequence>& parent, const std::shared_ptr<Sequence>& child) {
  kv_.fork(parent->id, child->id, parent->num_computed);
  child->tokens.assign(parent->tokens.begin(), parent->tokens.begin() + parent->num_computed);
  child->num_computed = parent->num_computed;
  child->cached_prompt_tokens = parent->cached_prompt_tokens;
  child->n_shifts = parent->n_shifts;
  child->status = SeqStatus::Running;
  running_.push_back(child);
}

FinishReason Scheduler::stop_reason(const Sequence& seq, int32_t token) const {
  const StopParams& stop = seq.request->stop;
  if (!stop.ignore_eos && cfg_.is_eog && cfg_.is_eog(token)) return FinishReason::Stop;
  if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) != stop.stop_token_ids.end())
    return FinishReason::Stop;
  if (stop.max_tokens > 0 && static_cast<int>(seq.output.size()) >= stop.max_tokens) return FinishReason::Length;
  // The new token would need a cache slot past the limit.
  if (!cfg_.context_shift && seq.num_computed >= cfg_.ctx_limit) return FinishReason::Length;
  return FinishReason::None;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::update(const std::vector<int32_t>& sampled) {
  std::vector<std::vector<int32_t>> emitted(sampled.size());
  for (size_t j = 0; j < sampled.size(); ++j) emitted[j] = {sampled[j]};
  return update_emitted(emitted);
}

void Scheduler::release_behind_window(const Sequence& seq) {
  // A context shift keeps the first n_keep tokens' blocks and may bring them back into view.
  kv_.release_behind_window(seq.id, seq.num_computed, cfg_.context_shift ? seq.n_keep : 0);
}

bool Scheduler::take_token(const std::shared_ptr<Sequence>& seq, int32_t token) {
  seq->output.push_back(token);
  ++counters_.generation_tokens;
  const FinishReason r = stop_reason(*seq, token);
  if (r != FinishReason::None) finish(seq, r);
  return r == FinishReason::None;
}

std::vector<std::shared_ptr<Sequence>> Scheduler::update_emitted(const std::vector<std::vector<int32_t>>& emitted) {
  const std::vector<SampleTarget> targets = targets_;  // take_emitted clears them
  const std::vector<int> taken = take_emitted(emitted);
  std::vector<std::shared_ptr<Sequence>> out;
  for (size_t j = 0; j < targets.size(); ++j) out.insert(out.end(), static_cast<size_t>(taken[j]), targets[j].seq);
  return out;
}

std::vector<int> Scheduler::take_emitted(const std::vector<std::vector<int32_t>>& emitted) {
  if (emitted.size() != targets_.size())
    throw std::invalid_argument("scheduler: one sampled token per sample target expected");
  for (size_t j = 0; j < emitted.size(); ++j)
    if (emitted[j].empty())
      throw std::invalid_argument("scheduler: a target takes at least one token");
  for (const auto& r : prompt_rows_)
    r.seq->prompt_logprob_rows_done = std::max(r.seq->prompt_logprob_rows_done, r.first_position + r.n);
  for (const auto& r : hidden_rows_)
    r.seq->pooled_upto = std::max(r.seq->pooled_upto, r.first_position + r.n);
  for (const auto& s : scheduled_) {
    Sequence& seq = *s.seq;
    if (seq.status != SeqStatus::Running || s.tree) continue;
    seq.num_computed += s.n_tokens;
    if (s.prefill) counters_.prefill_tokens_computed += s.n_tokens;
    kv_.commit(seq.id, seq.tokens, seq.num_computed);
    if (seq.sample) release_behind_window(seq);
    if (!seq.sample && seq.num_computed == seq.num_tokens() && seq.request->embed) {
      finish(s.seq, FinishReason::Stop);  // an embedding: pooled; its full blocks stay cached
    } else if (!seq.sample && seq.num_computed == seq.num_tokens()) {
      // A prefill-only sequence (the system prompt) is done: its blocks stay pinned.
      kv_.pin(seq.id, seq.tokens);
      remove_running(seq);
      seq.status = SeqStatus::Finished;
      finished_.push_back(s.seq);
    }
  }
  // Forks first: a parent may finish on its first token and free its blocks below.
  for (const auto& t : targets_)
    if (t.fork_from && t.seq->status == SeqStatus::PendingFork && t.fork_from->status == SeqStatus::Running)
      fork_sibling(t.fork_from, t.seq);
  for (const auto& t : targets_)
    if (!t.fork_from) t.seq->siblings.clear();

  std::vector<int> taken(targets_.size(), 0);
  for (size_t j = 0; j < targets_.size(); ++j) {
    const auto& seq = targets_[j].seq;
    if (seq->status != SeqStatus::Running) continue;
    if (targets_[j].tree) {
      taken[j] = take_tree_tokens(targets_[j], emitted[j]);
      continue;
    }
    // The sampled token, then any the grammar forced after it (until one ends the sequence).
    for (int32_t token : emitted[j]) {
      seq->tokens.push_back(token);
      ++taken[j];
      if (!take_token(seq, token)) break;
    }
    seq->forced_tail = taken[j] - 1;
    counters_.forced_tokens += static_cast<uint64_t>(taken[j] - 1);
  }
  scheduled_.clear();
  targets_.clear();
  prompt_rows_.clear();
  hidden_rows_.clear();
  return taken;
}

void Scheduler::finish(const std::shared_ptr<Sequence>& seq, FinishReason reason, const std::string& error) {
  if (seq->status == SeqStatus::Finished) {
    seq->finish = reason;
    if (!error.empty()) seq->error = error;
    return;
  }
  if (seq->status == SeqStatus::Running) {
    kv_.free(seq->id);
    remove_running(*seq);
  } else if (seq->status == SeqStatus::Waiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
    kv_.free(seq->id);  // normally holds nothing
  }
  seq->status = SeqStatus::Finished;
  seq->finish = reason;
  seq->error = error;
  finished_.push_back(seq);
  for (const auto& sib : seq->siblings)
    if (sib->status == SeqStatus::PendingFork) finish(sib, reason, error);
}

std::vector<std::shared_ptr<Sequence>> Scheduler::take_finished() {
  std::vector<std::shared_ptr<Sequence>> out;
  out.swap(finished_);
  return out;
}

}  // namespace pagoda
