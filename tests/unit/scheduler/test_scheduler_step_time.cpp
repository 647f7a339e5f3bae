// Stall-free prefill: the step cost model's fit, and prefill chunks cut to a step-time target
// while decodes run (exact: the cost model is injected with dyadic coefficients, no clock).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "engine/scheduler/step_cost.h"

using namespace pagoda;

namespace {

uint64_t g_next_id = 1;

std::shared_ptr<Sequence> make_seq(int prompt_len, int max_tokens) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt.resize(prompt_len);
  std::iota(req->prompt.begin(), req->prompt.end(), static_cast<int32_t>(g_next_id * 1000));  // no shared prefix
  req->stop.max_tokens = max_tokens;
  auto seq = std::make_shared<Sequence>();
  seq->id = g_next_id++;
  seq->request = req;
  seq->tokens = req->prompt;
  return seq;
}

StepPlan step(Scheduler& s) {
  StepPlan plan = s.schedule();
  s.update(std::vector<int32_t>(s.sample_targets().size(), 7));
  return plan;
}

// fixed 2 ms, 1/8 ms per token, 1/2 ms per logit row, no attention term: every sum is exact.
StepCostModel dyadic_cost() {
  StepCostModel m;
  m.set_coefficients({2.0, 0.125, 0.5, 0.0});
  return m;
}

struct Fixture {
  KvCacheManager kv{512, 4};
  StepCostModel cost = dyadic_cost();
  std::unique_ptr<Scheduler> s;
  std::vector<std::shared_ptr<Sequence>> decoding;

  explicit Fixture(double max_step_ms, int min_chunk = 16) {
    SchedulerConfig c;
    c.max_batch_tokens = 512;
    c.max_seqs = 8;
    c.ctx_limit = 1024;
    c.max_step_ms = max_step_ms;
    c.min_prefill_chunk = min_chunk;
    c.step_cost = &cost;
    s = std::make_unique<Scheduler>(c, kv);
    // Four short prompts, prefilled together in one step (no decodes: the whole budget).
    for (int i = 0; i < 4; ++i) {
      decoding.push_back(make_seq(4, 1000));
      s->add(decoding.back());
    }
    REQUIRE(step(*s).n_tokens() == 16);
  }
};

}  // namespace

TEST_CASE("step cost model: recovers a linear cost exactly from varied steps") {
  StepCostModel m;
  CHECK_FALSE(m.ready());
  CHECK(m.predict_ms(StepFeatures{}) == 0);
  const double fixed = 3, per_token = 0.02, per_row = 0.3, per_mpair = 40;
  auto truth = [&](const StepFeatures& f) {
    return fixed + per_token * f.tokens + per_row * f.logit_rows + per_mpair * f.attention_pairs * 1e-6;
  };
  for (int i = 0; i < 12; ++i) {
    StepFeatures f;
    f.add_chunk(100 * i, 1, 1);                // a decode
    for (int d = 0; d < i % 5; ++d) f.add_chunk(50 + d, 1, 1);
    if (i % 3 == 0) f.add_chunk(64 * i, 128 + 16 * i, i % 2);  // a prefill chunk
    m.observe(f, truth(f), i % 3 == 0);
  }
  REQUIRE(m.ready());
  const auto& c = m.coefficients();
  CHECK(c[0] == Approx(fixed).epsilon(1e-4));
  CHECK(c[1] == Approx(per_token).epsilon(1e-4));
  CHECK(c[2] == Approx(per_row).epsilon(1e-4));
  CHECK(c[3] == Approx(per_mpair).epsilon(1e-4));
  StepFeatures probe;
  probe.add_chunk(1000, 500, 1);
  CHECK(m.predict_ms(probe) == Approx(truth(probe)).epsilon(1e-4));
}

TEST_CASE("step cost model: no coefficient goes negative, bad timings are ignored") {
  StepCostModel m;
  // Time falls as tokens grow: the best non-negative fit has no per-token cost.
  for (int i = 1; i <= 6; ++i) {
    StepFeatures f;
    f.add_chunk(0, i, 1);
    m.observe(f, 10.0 - i, false);
  }
  for (double c : m.coefficients()) CHECK(c >= 0);
  const auto before = m.coefficients();
  StepFeatures f;
  f.add_chunk(0, 3, 1);
  m.observe(f, -1, true);
  m.observe(f, std::numeric_limits<double>::infinity(), true);
  CHECK(m.coefficients() == before);
}

TEST_CASE("auto target: a prefill beside decodes is cut to 1.75x the decode-only step") {
  Fixture fx(0);
  auto long_prompt = make_seq(200, 5);
  fx.s->add(long_prompt);
  // Decodes alone: 2 + 4/8 + 4/2 = 4.5 ms; target 7.875 ms leaves 3.375 ms = 27 prefill tokens.
  StepPlan plan = step(*fx.s);
  REQUIRE(plan.seqs.size() == 5);
  for (int i = 0; i < 4; ++i) CHECK(plan.seqs[i].n_tokens == 1);
  CHECK(plan.seqs[4].seq_id == long_prompt->id);
  CHECK(plan.seqs[4].n_tokens == 27);
  CHECK(long_prompt->num_computed == 27);
  // Every later step stays within the target; the chunk that completes the prompt also pays
  // for its logit row (3.375 - 0.5 = 2.875 ms = 23 tokens at most).
  int steps = 1;
  while (long_prompt->output.empty() && steps < 100) {
    const int before = long_prompt->num_computed;
    plan = step(*fx.s);
    ++steps;
    const int chunk = plan.seqs.back().n_tokens;
    CHECK(fx.cost.predict_ms(StepFeatures::of(plan)) <= 7.875);
    if (before + chunk == 200) CHECK(chunk <= 23);
    else CHECK(chunk == 27);
  }
  CHECK(long_prompt->output.size() == 1);
  CHECK(steps == 8);  // 7 chunks of 27 (189 tokens), then the last 11
}

TEST_CASE("step cost model: steps with prompt tokens are scaled by how the fit did on them") {
  StepCostModel m = dyadic_cost();
  StepFeatures decodes, chunk;
  for (int i = 0; i < 4; ++i) decodes.add_chunk(10, 1, 1);  // 4.5 ms fitted
  chunk = decodes;
  chunk.add_chunk(100, 64, 0);  // + 8 ms fitted
  REQUIRE(m.predict_ms(chunk) == 12.5);
  // Such steps take half their fitted time (fewer than the fit's minimum samples, so the fit
  // itself stays as set): the prediction follows, step by step, the decodes' does not move.
  double last = 12.5;
  for (int i = 0; i < 3; ++i) {
    m.observe(chunk, 6.25, true);
    CHECK(m.predict_ms(chunk) < last);
    CHECK(m.predict_ms(chunk) > 6.25);
    last = m.predict_ms(chunk);
  }
  CHECK(m.prompt_correction() == Approx(std::pow(0.5, 1 - std::pow(0.7, 3))));
  CHECK(m.predict_ms(decodes) == 4.5);
  CHECK(m.fitted_ms(chunk) == 12.5);
  // Decode-only steps leave it alone; one absurd timing moves it by a bounded step.
  m.observe(decodes, 100, false);
  const double c = m.prompt_correction();
  m.observe(chunk, 1e6, true);
  CHECK(m.prompt_correction() == Approx(std::pow(c, 0.7) * std::pow(4.0, 0.3)));  // a ratio of 4 at most
}

TEST_CASE("fixed target, minimum chunk, and no target without decodes or when off") {
  SECTION("max_step_ms 10: (10 - 4.5) * 8 = 44 tokens, after a slow start") {
    Fixture fx(10);
    auto p = make_seq(300, 5);
    fx.s->add(p);
    CHECK(step(*fx.s).seqs.back().n_tokens == 32);  // twice the 16 prefill tokens of the step before
    CHECK(step(*fx.s).seqs.back().n_tokens == 44);
    CHECK(step(*fx.s).seqs.back().n_tokens == 44);
  }
  SECTION("slow start: a prompt arriving among decodes starts at the minimum chunk and doubles") {
    Fixture fx(100, 8);
    step(*fx.s);  // decodes only: the last step had no prefill
    auto p = make_seq(300, 5);
    fx.s->add(p);
    std::vector<int> chunks;
    for (int i = 0; i < 5; ++i) chunks.push_back(step(*fx.s).seqs.back().n_tokens);
    CHECK(chunks == std::vector<int>{8, 16, 32, 64, 128});
  }
  SECTION("a target the decodes already exceed still moves the prompt by the minimum chunk") {
    Fixture fx(3, 8);
    auto p = make_seq(300, 5);
    auto q = make_seq(300, 5);
    fx.s->add(p);
    fx.s->add(q);
    StepPlan plan = step(*fx.s);
    REQUIRE(plan.seqs.size() == 5);  // q waits: only the first prefill gets the minimum
    CHECK(plan.seqs.back().n_tokens == 8);
  }
  SECTION("off (< 0): the token budget alone") {
    Fixture fx(-1);
    auto p = make_seq(300, 5);
    fx.s->add(p);
    CHECK(step(*fx.s).seqs.back().n_tokens == 300);
  }
  SECTION("without decodes the prompt takes the whole budget") {
    Fixture fx(0);
    for (auto& d : fx.decoding) fx.s->finish(d, FinishReason::Abort);
    auto p = make_seq(600, 5);
    fx.s->add(p);
    CHECK(step(*fx.s).n_tokens() == 512);
  }
  SECTION("an unfitted cost model sets no target") {
    KvCacheManager kv(512, 4);
    StepCostModel cold;
    SchedulerConfig c;
    c.max_batch_tokens = 512;
    c.ctx_limit = 1024;
    c.step_cost = &cold;
    Scheduler s(c, kv);
    auto a = make_seq(4, 100);
    s.add(a);
    step(s);
    auto p = make_seq(300, 5);
    s.add(p);
    CHECK(step(s).n_tokens() == 301);
  }
}
