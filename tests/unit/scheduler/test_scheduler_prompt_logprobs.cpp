// Scheduler: prompt-logprob rows (GenerationRequest::prompt_logprobs). Every prompt position
// 0..len-2 is asked for exactly once over the request's steps, apart from its sample rows;
// chunking, prefix-cache hits and preemption with recompute never skip or repeat one. No model:
// sampled tokens are scripted.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "engine/scheduler/scheduler.h"

using namespace pagoda;

namespace {

uint64_t g_next_id = 1;

std::shared_ptr<Sequence> make_seq(int prompt_len, int max_tokens, int prompt_logprobs, int first_token = 0) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt.resize(prompt_len);
  std::iota(req->prompt.begin(), req->prompt.end(), first_token);
  req->stop.max_tokens = max_tokens;
  req->prompt_logprobs = prompt_logprobs;
  auto seq = std::make_shared<Sequence>();
  seq->id = g_next_id++;
  seq->request = req;
  seq->tokens = req->prompt;
  return seq;
}

SchedulerConfig config(int budget, int max_seqs = 8) {
  SchedulerConfig c;
  c.max_batch_tokens = budget;
  c.max_seqs = max_seqs;
  c.ctx_limit = 1024;
  return c;
}

// Per sequence id, every position a prompt-logprob row was asked for, in order.
using Positions = std::map<uint64_t, std::vector<int>>;

// Runs one step (sampled token 7), checks the rows against the plan, records their positions.
void step(Scheduler& s, Positions& seen) {
  StepPlan plan = s.schedule();
  std::set<int> sample_rows;
  for (const auto& t : s.sample_targets()) sample_rows.insert(t.logit_row);
  std::set<int> rows;
  for (const auto& r : s.prompt_logprob_rows()) {
    REQUIRE(r.n > 0);
    for (int k = 0; k < r.n; ++k) {
      const int row = r.first_row + k;
      REQUIRE(row < static_cast<int>(plan.logit_rows.size()));
      CHECK(sample_rows.count(row) == 0);  // never a sample target's row
      CHECK(rows.insert(row).second);
      const int t = plan.logit_rows[static_cast<size_t>(row)];
      // The row is the token at that position of that sequence.
      CHECK(plan.positions[static_cast<size_t>(t)] == r.first_position + k);
      CHECK(plan.seqs[static_cast<size_t>(plan.token_seq[static_cast<size_t>(t)])].seq_id == r.seq->id);
      seen[r.seq->id].push_back(r.first_position + k);
    }
  }
  CHECK(rows.size() + sample_rows.size() == plan.logit_rows.size());
  s.update(std::vector<int32_t>(s.sample_targets().size(), 7));
}

std::vector<int> range(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("prompt logprob rows: every position once, chunked, next to sample rows") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(8), kv);
  auto a = make_seq(21, 3, 2);
  auto b = make_seq(5, 3, -1, 100);  // no prompt logprobs: sample rows only
  auto c = make_seq(1, 3, 0, 200);   // one token: nothing to score
  s.add(a);
  s.add(b);
  s.add(c);
  Positions seen;
  for (int i = 0; i < 20 && s.has_work(); ++i) step(s, seen);
  CHECK_FALSE(s.has_work());
  CHECK(seen[a->id] == range(20));
  CHECK(seen.count(b->id) == 0);
  CHECK(seen.count(c->id) == 0);
  CHECK(a->output.size() == 3);
}

TEST_CASE("prompt logprob rows: cached prefix blocks are not reused for them") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(64), kv);
  auto warm = make_seq(17, 1, -1);
  s.add(warm);
  Positions seen;
  while (s.has_work()) step(s, seen);
  CHECK(warm->cached_prompt_tokens == 0);

  auto plain = make_seq(17, 1, -1);  // the same prompt hits the cache
  s.add(plain);
  while (s.has_work()) step(s, seen);
  CHECK(plain->cached_prompt_tokens == 16);

  auto lp = make_seq(17, 1, 1);  // the same prompt with prompt logprobs computes it all
  s.add(lp);
  while (s.has_work()) step(s, seen);
  CHECK(lp->cached_prompt_tokens == 0);
  CHECK(seen[lp->id] == range(16));
}

TEST_CASE("prompt logprob rows: preemption and recompute report no position twice") {
  // 7 blocks of 4: two 12-token prompts growing by decode cannot both stay.
  KvCacheManager kv(7, 4);
  Scheduler s(config(6, 4), kv);
  auto a = make_seq(12, 8, 1);
  auto b = make_seq(12, 8, 1, 50);
  s.add(a);
  s.add(b);
  Positions seen;
  for (int i = 0; i < 200 && s.has_work(); ++i) step(s, seen);
  CHECK_FALSE(s.has_work());
  CHECK(s.counters().preemptions > 0);
  CHECK(seen[a->id] == range(11));
  CHECK(seen[b->id] == range(11));
}

TEST_CASE("prompt logprob rows: a prefill preempted halfway resumes where it stopped") {
  // A decodes while B's long prompt comes in chunks of 3; the cache runs out halfway through B.
  KvCacheManager kv(8, 4);
  Scheduler s(config(4, 4), kv);
  auto a = make_seq(4, 40, -1);
  auto b = make_seq(28, 2, 1, 60);
  s.add(a);
  s.add(b);
  Positions seen;
  bool preempted_halfway = false;
  for (int i = 0; i < 400 && s.has_work(); ++i) {
    step(s, seen);
    const int done = b->prompt_logprob_rows_done;
    if (b->status == SeqStatus::Waiting && done > 0 && done < b->prompt_len() - 1) preempted_halfway = true;
  }
  CHECK_FALSE(s.has_work());
  CHECK(preempted_halfway);
  CHECK(seen[b->id] == range(27));
}
