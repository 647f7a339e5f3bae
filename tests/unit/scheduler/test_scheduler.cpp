// Scheduler: token budget, ordering, chunked prefill, preemption, stops, context shift, n > 1,
// and no block leaks after any mix of finish / abort / preempt. No model: sampled tokens are
// scripted.
#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "engine/scheduler/scheduler.h"

using namespace pagoda;

namespace {

uint64_t g_next_id = 1;

std::shared_ptr<Sequence> make_seq(int prompt_len, int max_tokens, int first_token = 0, int n = 1) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt.resize(prompt_len);
  std::iota(req->prompt.begin(), req->prompt.end(), first_token);
  req->stop.max_tokens = max_tokens;
  req->n = n;
  auto seq = std::make_shared<Sequence>();
  seq->id = g_next_id++;
  seq->request = req;
  seq->tokens = req->prompt;
  for (int i = 1; i < n; ++i) {
    auto sib = std::make_shared<Sequence>();
    sib->id = g_next_id++;
    sib->index = i;
    sib->request = req;
    sib->status = SeqStatus::PendingFork;
    seq->siblings.push_back(sib);
  }
  return seq;
}

SchedulerConfig config(int budget, int max_seqs, int ctx = 1024) {
  SchedulerConfig c;
  c.max_batch_tokens = budget;
  c.max_seqs = max_seqs;
  c.ctx_limit = ctx;
  return c;
}

// Runs one step with every sampled token = `tok`.
std::vector<std::shared_ptr<Sequence>> step(Scheduler& s, StepPlan* plan_out = nullptr, int32_t tok = 7) {
  StepPlan plan = s.schedule();
  std::vector<int32_t> sampled(s.sample_targets().size(), tok);
  if (plan_out) *plan_out = plan;
  return s.update(sampled);
}

}  // namespace

TEST_CASE("budget, chunked prefill and decode-first ordering") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(8, 4), kv);
  auto a = make_seq(10, 5);
  s.add(a);
  StepPlan plan = s.schedule();
  REQUIRE(plan.n_tokens() == 8);  // first chunk of A
  CHECK(plan.logit_rows.empty());
  CHECK(plan.positions == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(plan.slots == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].n_past == 0);
  CHECK(plan.seqs[0].n_blocks == 2);
  CHECK(s.update({}).empty());
  CHECK(a->num_computed == 8);

  auto b = make_seq(3, 5, 100);
  s.add(b);
  plan = s.schedule();
  // A's remaining prefill, then B admitted with the rest of the budget.
  REQUIRE(plan.seqs.size() == 2);
  CHECK(plan.seqs[0].seq_id == a->id);
  CHECK(plan.seqs[0].n_tokens == 2);
  CHECK(plan.seqs[0].n_past == 8);
  CHECK(plan.seqs[1].seq_id == b->id);
  CHECK(plan.seqs[1].n_tokens == 3);
  CHECK(plan.positions == std::vector<int32_t>{8, 9, 0, 1, 2});
  CHECK(plan.slots == std::vector<int32_t>{8, 9, 12, 13, 14});  // B got block 3
  CHECK(plan.logit_rows == std::vector<int32_t>{1, 4});
  CHECK(plan.block_tables == std::vector<int32_t>{0, 1, 2, 3});
  auto got = s.update({11, 12});
  REQUIRE(got.size() == 2);
  CHECK(a->output == std::vector<int32_t>{11});
  CHECK(b->output == std::vector<int32_t>{12});

  // A long prompt arrives: decodes go first, the prompt gets the rest of the budget.
  auto c = make_seq(20, 5, 200);
  s.add(c);
  plan = s.schedule();
  REQUIRE(plan.seqs.size() == 3);
  CHECK(plan.seqs[0].seq_id == a->id);
  CHECK(plan.seqs[0].n_tokens == 1);
  CHECK(plan.tokens[0] == 11);
  CHECK(plan.positions[0] == 10);
  CHECK(plan.seqs[1].seq_id == b->id);
  CHECK(plan.seqs[2].seq_id == c->id);
  CHECK(plan.seqs[2].n_tokens == 6);
  CHECK(plan.logit_rows == std::vector<int32_t>{0, 1});
  s.update({1, 2});
  CHECK(c->num_computed == 6);
}

TEST_CASE("prompt chunks are marked prefill, one-token ones too; decodes are not") {
  KvCacheManager kv(64, 4);
  SECTION("a prompt's last token alone, scheduled with the decodes") {
    Scheduler s(config(8, 4), kv);
    auto a = make_seq(9, 5);
    s.add(a);
    StepPlan plan = s.schedule();
    REQUIRE(plan.seqs.size() == 1);
    CHECK(plan.seqs[0].n_tokens == 8);
    CHECK(plan.seqs[0].prefill);
    s.update({});
    auto b = make_seq(15, 5, 100);
    s.add(b);
    // a's one token beside b's 7-token chunk: a prompt token the first time, a decode after.
    auto check_a_then_b = [&](const StepPlan& p, bool a_prefill) {
      REQUIRE(p.seqs.size() == 2);
      CHECK(p.seqs[0].seq_id == a->id);
      CHECK(p.seqs[0].n_tokens == 1);
      CHECK(p.seqs[0].prefill == a_prefill);
      CHECK(p.seqs[1].n_tokens == 7);
      CHECK(p.seqs[1].prefill);
    };
    check_a_then_b(s.schedule(), true);
    s.update({11});
    check_a_then_b(s.schedule(), false);
  }
  SECTION("a one-token chunk the budget leaves in the middle of a prompt") {
    Scheduler s(config(3, 4), kv);
    auto a = make_seq(1, 5), b = make_seq(1, 5, 50), c = make_seq(10, 5, 100);
    for (const auto& q : {a, b, c}) s.add(q);
    StepPlan plan = s.schedule();
    REQUIRE(plan.seqs.size() == 3);
    for (const SeqInStep& q : plan.seqs) {
      CHECK(q.n_tokens == 1);
      CHECK(q.prefill);
    }
    s.update({11, 12});
    plan = s.schedule();
    REQUIRE(plan.seqs.size() == 3);
    CHECK_FALSE(plan.seqs[0].prefill);
    CHECK_FALSE(plan.seqs[1].prefill);
    CHECK(plan.seqs[2].seq_id == c->id);
    CHECK(plan.seqs[2].n_past == 1);
    CHECK(plan.seqs[2].n_tokens == 1);
    CHECK(plan.seqs[2].prefill);
  }
}

TEST_CASE("max_seqs caps running sequences; the queue is FCFS") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(64, 2), kv);
  auto a = make_seq(4, 3), b = make_seq(4, 3, 10), c = make_seq(4, 3, 20);
  s.add(a);
  s.add(b);
  s.add(c);
  StepPlan plan;
  step(s, &plan);
  CHECK(plan.seqs.size() == 2);
  CHECK(s.num_running() == 2);
  CHECK(s.num_waiting() == 1);
  step(s);
  step(s);  // a and b reach max_tokens = 3
  CHECK(a->finished());
  CHECK(a->finish == FinishReason::Length);
  CHECK(a->output.size() == 3);
  step(s, &plan);
  CHECK(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].seq_id == c->id);
}

TEST_CASE("preemption: a sequence that cannot get a block yields and resumes by recompute") {
  KvCacheManager kv(5, 4);
  Scheduler s(config(64, 4), kv);
  auto a = make_seq(6, 6, 0);
  auto b = make_seq(6, 5, 100);
  s.add(a);
  s.add(b);
  step(s);  // both prefilled: blocks 0 1 and 2 3; each holds 7 tokens
  CHECK(kv.block_table(a->id) == std::vector<int32_t>{0, 1});
  CHECK(kv.block_table(b->id) == std::vector<int32_t>{2, 3});
  step(s);
  step(s);
  CHECK(a->num_computed == 8);
  CHECK(b->num_computed == 8);
  // Both need a third block for position 8; A (older) takes the last one, B is preempted.
  StepPlan plan;
  step(s, &plan);
  CHECK(s.counters().preemptions == 1);
  CHECK(b->status == SeqStatus::Waiting);
  CHECK(b->num_computed == 0);
  REQUIRE(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].seq_id == a->id);
  CHECK(kv.block_table(a->id) == std::vector<int32_t>{0, 1, 4});
  CHECK(kv.pool().free_list() == std::vector<int>{3, 2});  // B's full blocks, still cached
  const auto b_tokens = b->tokens;
  // A runs to max_tokens, then B resumes from the prefix cache with nothing lost.
  while (!a->finished()) step(s);
  step(s, &plan);
  REQUIRE(plan.seqs.size() == 1);
  CHECK(plan.seqs[0].seq_id == b->id);
  CHECK(plan.seqs[0].n_past == 8);  // its two full blocks were reused
  CHECK(plan.seqs[0].n_tokens == 1);
  CHECK(b->tokens.size() == b_tokens.size() + 1);
  CHECK(std::equal(b_tokens.begin(), b_tokens.end(), b->tokens.begin()));
  while (!b->finished()) step(s);
  CHECK(b->output.size() == 5);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("a recompute after preemption: prompt tokens in prompt chunks, drawn ones as decode rows") {
  // Recomputed tokens keep the kind of row they had the first time (SeqInStep::prefill), and no
  // chunk holds both kinds: a backend that computes the two differently (CUDA with
  // batch_invariant) gives them the same bits again. B (prompt 6) is preempted at 8 computed
  // tokens; A's growth takes B's cached second block, so B recomputes positions 4-5 of its
  // prompt, then its drawn tokens 6-8 in one chunk.
  KvCacheManager kv(5, 4);
  Scheduler s(config(64, 4), kv);
  auto a = make_seq(6, 10, 0);
  auto b = make_seq(6, 5, 100);
  s.add(a);
  s.add(b);
  bool preempted = false, recomputed_output = false;
  for (int i = 0; i < 64 && !b->finished(); ++i) {
    StepPlan plan;
    step(s, &plan);
    for (const SeqInStep& q : plan.seqs) {
      if (q.seq_id != b->id) continue;
      const int end = q.n_past + q.n_tokens;
      INFO("step " << i << ": B's positions " << q.n_past << " to " << end - 1);
      if (q.n_past < 6) {
        CHECK(end <= 6);
        CHECK(q.prefill);
      } else {
        CHECK_FALSE(q.prefill);
      }
      if (preempted && q.n_past >= 6 && q.n_tokens > 1) recomputed_output = true;
    }
    preempted = preempted || s.counters().preemptions > 0;
  }
  CHECK(b->finished());
  CHECK(b->output.size() == 5);
  CHECK(preempted);
  CHECK(recomputed_output);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("a prompt that cannot fit the cache is rejected with an error") {
  KvCacheManager kv(2, 4);
  Scheduler s(config(64, 4), kv);
  auto a = make_seq(12, 2);
  s.add(a);
  StepPlan plan = s.schedule();
  CHECK(plan.empty());
  CHECK(a->finished());
  CHECK(a->finish == FinishReason::Error);
  CHECK_FALSE(a->error.empty());
  CHECK(s.take_finished().size() == 1);
  CHECK_FALSE(s.has_work());
}

TEST_CASE("stop tokens, ignore_eos and stop_token_ids") {
  KvCacheManager kv(64, 4);
  SchedulerConfig cfg = config(64, 4);
  cfg.is_eog = [](int32_t t) { return t == 2; };
  Scheduler s(cfg, kv);
  auto a = make_seq(3, 10);
  auto b = make_seq(3, 10, 50);
  std::const_pointer_cast<GenerationRequest>(b->request)->stop.ignore_eos = true;
  auto c = make_seq(3, 10, 90);
  std::const_pointer_cast<GenerationRequest>(c->request)->stop.stop_token_ids = {9};
  s.add(a);
  s.add(b);
  s.add(c);
  s.schedule();
  s.update({5, 5, 5});
  s.schedule();
  s.update({2, 2, 9});
  CHECK(a->finish == FinishReason::Stop);
  CHECK(b->status == SeqStatus::Running);
  CHECK(c->finish == FinishReason::Stop);
  CHECK(a->output == std::vector<int32_t>{5, 2});
  CHECK(s.take_finished().size() == 2);
  s.finish(b, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("context limit: shift keeps n_keep and continues; with shift off, finish length") {
  for (bool shift : {true, false}) {
    KvCacheManager kv(64, 4);
    SchedulerConfig cfg = config(64, 4, 16);
    cfg.context_shift = shift;
    Scheduler s(cfg, kv);
    auto a = make_seq(10, 100);
    a->n_keep = 3;  // rounded up to one block
    s.add(a);
    for (int i = 0; i < 7; ++i) step(s, nullptr, 100 + i);  // 16 tokens computed + 1 pending
    REQUIRE(a->num_computed == 16);
    if (!shift) {
      CHECK(a->finished());
      CHECK(a->finish == FinishReason::Length);
      CHECK(a->output.size() == 7);
      continue;
    }
    const auto before = a->tokens;
    const auto table = kv.block_table(a->id);
    StepPlan plan;
    step(s, &plan, 200);
    // n_keep 4, 12 left -> drop 6 rounded down to whole blocks = 4 tokens (block 1).
    REQUIRE(plan.k_shifts.size() == 2);
    CHECK(plan.k_shifts[0].block == table[2]);
    CHECK(plan.k_shifts[0].delta == -4);
    CHECK(plan.k_shifts[1].block == table[3]);
    CHECK(plan.block_copies.empty());
    CHECK(plan.positions == std::vector<int32_t>{12});
    CHECK(a->n_shifts == 1);
    std::vector<int32_t> expect(before.begin(), before.begin() + 4);
    expect.insert(expect.end(), before.begin() + 8, before.end());
    expect.push_back(200);
    CHECK(a->tokens == expect);
    CHECK(a->output.size() == 8);
    for (int i = 0; i < 50; ++i) step(s);
    CHECK(a->status == SeqStatus::Running);
    CHECK(a->num_computed <= 16);
    s.finish(a, FinishReason::Abort);
    CHECK(kv.pool().stats().used == 0);
  }
}

TEST_CASE("n > 1: siblings fork after the prompt and share its blocks") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(64, 8), kv);
  auto a = make_seq(6, 4, 0, 3);
  s.add(a);
  StepPlan plan = s.schedule();
  REQUIRE(s.sample_targets().size() == 3);
  CHECK(s.sample_targets()[1].logit_row == 0);
  CHECK(s.sample_targets()[2].logit_row == 0);
  auto got = s.update({10, 11, 12});
  REQUIRE(got.size() == 3);
  CHECK(s.num_running() == 3);
  auto b = a->siblings.empty() ? got[1] : nullptr;
  REQUIRE(b);
  CHECK(got[1]->tokens == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 11});
  CHECK(got[2]->output == std::vector<int32_t>{12});
  CHECK(kv.pool().ref_count(kv.block_table(a->id)[0]) == 3);
  plan = s.schedule();
  CHECK(plan.block_copies.size() == 2);  // the shared partial block, for all but its last writer
  CHECK(plan.seqs.size() == 3);
  s.update({1, 1, 1});
  for (const auto& seq : got) s.finish(seq, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
}

TEST_CASE("no block leaks after random mixes of finish, abort and preemption") {
  for (int seed = 0; seed < 30; ++seed) {
    std::mt19937 rng(seed);
    KvCacheManager kv(24, 4);
    SchedulerConfig cfg = config(8 + rng() % 40, 1 + rng() % 8, 64);
    cfg.context_shift = rng() % 2;
    cfg.is_eog = [](int32_t t) { return t == 3; };
    Scheduler s(cfg, kv);
    std::vector<std::shared_ptr<Sequence>> all;
    for (int it = 0; it < 300; ++it) {
      if (rng() % 4 == 0) {
        auto q = make_seq(1 + rng() % 40, 1 + rng() % 60, (rng() % 3) * 100, 1 + rng() % 3);
        q->n_keep = rng() % 8;
        all.push_back(q);
        s.add(q);
      }
      if (rng() % 10 == 0 && !all.empty()) {
        auto& v = all[rng() % all.size()];
        s.finish(v, FinishReason::Abort);
        for (auto& sib : v->siblings) s.finish(sib, FinishReason::Abort);
      }
      s.schedule();
      std::vector<int32_t> sampled;
      for (size_t j = 0; j < s.sample_targets().size(); ++j) sampled.push_back(rng() % 40);
      s.update(sampled);
      s.take_finished();
    }
    while (s.has_work()) {
      s.schedule();
      std::vector<int32_t> sampled(s.sample_targets().size(), 3);  // EOS: everything ends
      s.update(sampled);
    }
    const auto st = kv.pool().stats();
    CHECK(st.used == 0);
    CHECK(kv.pool().num_available() == 24);
  }
}

TEST_CASE("a sequence preempted at the context limit resumes with the same cut, or ends") {
  for (bool shift : {true, false}) {
    KvCacheManager kv(64, 4);
    SchedulerConfig cfg = config(64, 4, 16);
    cfg.context_shift = shift;
    Scheduler s(cfg, kv);
    auto a = make_seq(10, 100);
    a->n_keep = 4;
    a->cached_prompt_tokens = 0;  // admitted before
    for (int i = 0; i < 7; ++i) {  // as if preempted with 16 tokens in the cache + 1 pending
      a->tokens.push_back(100 + i);
      a->output.push_back(100 + i);
    }
    s.add(a);
    StepPlan plan = s.schedule();
    if (!shift) {
      CHECK(a->finish == FinishReason::Length);
      CHECK(plan.empty());
      continue;
    }
    // 16 cached tokens, keep 4, drop (12 / 2) rounded down to a block = 4: 13 left, the 6 of
    // the prompt in one chunk, then the 7 drawn ones in the next (Sequence::output_begin).
    REQUIRE(plan.n_tokens() == 6);
    CHECK(plan.seqs[0].prefill);
    CHECK(a->n_shifts == 1);
    CHECK(a->tokens[3] == 3);
    CHECK(a->tokens[4] == 8);
    CHECK(s.update({}).empty());
    step(s, &plan);
    REQUIRE(plan.n_tokens() == 7);
    CHECK_FALSE(plan.seqs[0].prefill);
    CHECK(plan.positions.back() == 12);
    s.finish(a, FinishReason::Abort);
    CHECK(kv.pool().stats().used == 0);
  }
}

TEST_CASE("forced tokens: a target takes its sampled token and those after it, computed as one decode chunk") {
  KvCacheManager kv(64, 4);
  Scheduler s(config(16, 4), kv);
  auto a = make_seq(4, 6);
  s.add(a);
  s.schedule();
  // The sampled token 50, then three the grammar forced.
  CHECK(s.take_emitted({{50, 51, 52, 53}}) == std::vector<int>{4});
  CHECK(a->output == std::vector<int32_t>{50, 51, 52, 53});
  CHECK(a->forced_tail == 3);
  CHECK(s.counters().forced_tokens == 3);
  CHECK(s.counters().generation_tokens == 4);
  // A new prompt arrives: the forced chunk goes first, in the decode pass, with one logits row.
  auto b = make_seq(20, 5, 100);
  s.add(b);
  StepPlan plan = s.schedule();
  REQUIRE(plan.seqs.size() == 2);
  CHECK(plan.seqs[0].seq_id == a->id);
  CHECK(plan.seqs[0].n_tokens == 4);
  CHECK(plan.seqs[0].n_past == 4);
  CHECK(std::vector<int32_t>(plan.tokens.begin(), plan.tokens.begin() + 4) == std::vector<int32_t>{50, 51, 52, 53});
  CHECK(plan.positions[3] == 7);
  CHECK(plan.logit_rows.front() == 3);
  CHECK(plan.seqs[1].n_tokens == 12);
  // max_tokens = 6 ends it after the second of three emitted tokens.
  CHECK(s.take_emitted({{60, 61, 62}}) == std::vector<int>{2});
  CHECK(a->finished());
  CHECK(a->finish == FinishReason::Length);
  CHECK(a->output.size() == 6);
}
