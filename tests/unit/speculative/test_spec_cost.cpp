// Speculation's cost gate (spec_cost.h) without timings: the pure decision against fake costs,
// then the scheduler with a step-cost model whose coefficients are set by hand, drafting deep
// for one bandwidth-bound stream and not at all for a compute-bound batch.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "engine/speculative/spec_cost.h"

using namespace pagoda;

TEST_CASE("cost gate: drafts while a token's expected worth exceeds its cost") {
  const auto per_token = [](double ms) { return [ms](int k) { return ms * k; }; };
  DraftCostInputs in;
  in.acceptance = 1.0;
  in.token_share_ms = 10;
  in.max_draft = 6;
  CHECK(drafts_worth_cost(in, per_token(1)) == 6);    // certain acceptance, cheap tokens: all
  CHECK(drafts_worth_cost(in, per_token(11)) == 0);   // each token costs more than a step share
  in.acceptance = 0.5;  // worth of token k: 10 x 0.5^k = 5, 2.5, 1.25, 0.625, ...
  CHECK(drafts_worth_cost(in, per_token(1)) == 3);
  CHECK(drafts_worth_cost(in, per_token(3)) == 1);
  CHECK(drafts_worth_cost(in, per_token(6)) == 0);
  in.acceptance = 0;
  CHECK(drafts_worth_cost(in, per_token(0.01)) == 0);
  // A fixed extra cost for any tree (an attention pass over it): deep enough to pay it back.
  in.acceptance = 0.9;
  in.max_draft = 8;
  const int k = drafts_worth_cost(in, [](int k) { return 12 + 0.5 * k; });
  CHECK(k >= 4);
  in.max_draft = 1;  // 9 worth against 12.5 cost
  CHECK(drafts_worth_cost(in, [](int k) { return 12 + 0.5 * k; }) == 0);
}

namespace {

std::shared_ptr<Sequence> make_seq(uint64_t id, int max_tokens) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt = {1, 2, 3};
  req->stop.max_tokens = max_tokens;
  auto seq = std::make_shared<Sequence>();
  seq->id = id;
  seq->request = req;
  seq->tokens = req->prompt;
  seq->speculate = true;
  seq->spec.acceptance = 0.8;
  return seq;
}

// `n` sequences past their prompts, decoding; returns what each asked the drafter for in the
// `steps`-th decode step.
std::vector<int> asked_for_drafts(int n, const StepCostModel& cost, int steps = 1) {
  KvCacheManager kv(256, 4);
  SchedulerConfig c;
  c.max_batch_tokens = 256;
  c.max_seqs = 32;
  c.ctx_limit = 64;
  c.spec_tokens = 8;
  c.spec_step_tokens = 256;  // the cost gate alone decides here
  c.step_cost = &cost;
  std::vector<int> asked;
  c.draft = [&](const Sequence& seq, int max_draft) {
    asked.push_back(max_draft);
    return DraftTree(seq.tokens.back());
  };
  Scheduler s(c, kv);
  std::vector<std::shared_ptr<Sequence>> seqs;
  for (int i = 0; i < n; ++i) s.add(seqs.emplace_back(make_seq(static_cast<uint64_t>(i + 1), 20)));
  s.schedule();
  s.update(std::vector<int32_t>(static_cast<size_t>(n), 50));
  for (int step = 1; step <= steps; ++step) {
    asked.clear();
    s.schedule();
    if (step < steps) s.update(std::vector<int32_t>(static_cast<size_t>(n), 50 + step));  // plain decodes
  }
  for (const auto& seq : seqs) s.finish(seq, FinishReason::Abort);
  CHECK(kv.pool().stats().used == 0);
  return asked;
}

}  // namespace

TEST_CASE("cost gate in the scheduler: one bandwidth-bound stream drafts, a compute-bound batch does not") {
  // 20 ms per step (weights streamed once), 0.5 ms per token, 0.1 ms per logit row.
  StepCostModel cost;
  cost.set_coefficients({20, 0.5, 0.1, 0});
  // One stream: a token is worth 20.6 ms x 0.8^k, costs 0.6 ms: all 8 pay.
  CHECK(asked_for_drafts(1, cost) == std::vector<int>{8});
  // 24 streams: a share is 20/24 + 0.6 = 1.43 ms; 1.43 x 0.8^k >= 0.6 up to k = 3.
  const std::vector<int> batch = asked_for_drafts(24, cost);
  CHECK(batch.size() == 24);
  for (int k : batch) CHECK(k == 3);
  // Compute-bound: no fixed cost to share, every token costs what it earns at best: none draft.
  cost.set_coefficients({0, 0.5, 0.1, 0});
  CHECK(asked_for_drafts(4, cost).empty());
  // ... except every 16th decode, which drafts anyway so the acceptance estimate stays current.
  CHECK(asked_for_drafts(4, cost, SpecState::kProbeEvery - 1).empty());
  CHECK(asked_for_drafts(4, cost, SpecState::kProbeEvery) == std::vector<int>{8, 8, 8, 8});
  // No ready cost model: the fixed budgets alone.
  CHECK(asked_for_drafts(4, StepCostModel{}) == std::vector<int>{8, 8, 8, 8});
}
