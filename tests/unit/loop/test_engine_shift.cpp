// Context shift on the real cache: scheduler + KV manager + Model on the CPU backend, driven
// step by step so the cache can be read just before and after the step that shifts.
//
// Checked: the re-roped K of every kept later token equals the original K rotated by -n_discard
// positions (tolerance: 2e-5 * (1 + |K|) with an F32 cache, 4e-3 * (1 + |K|) with F16, which
// re-rounds to 11 bits, 1e-2 * (1 + max|K of the head|) with Q8_0, which re-quantizes the
// rotated values to steps of max|group| / 127), V is bit-identical, and the blocks another sequence still uses are
// bit-identical (they were copied, not shifted).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/sampling/sampling.h"
#include "engine/scheduler/scheduler.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

struct BlockData {
  std::vector<std::vector<float>> k, v;  // per layer
};

BlockData read_block(Model& m, int block, int block_size) {
  const ModelConfig& c = m.config();
  const size_t n = static_cast<size_t>(block_size) * c.n_kv_heads * c.head_dim;
  BlockData d;
  for (int l = 0; l < c.n_layers; ++l) {
    d.k.emplace_back(n);
    d.v.emplace_back(n);
    m.backend().read_kv_block(l, block, d.k.back().data(), d.v.back().data());
  }
  return d;
}

// Runs one scheduled step: forward, greedy sampling, update.
void run_step(Scheduler& s, Model& m, const StepPlan& plan) {
  std::vector<float> logits;
  m.forward(plan, logits);
  const int vocab = m.config().vocab_size;
  std::vector<int32_t> sampled;
  for (const auto& t : s.sample_targets()) {
    Rng rng(0);
    sampled.push_back(sample_token(logits.data() + static_cast<size_t>(t.logit_row) * vocab, vocab,
                                   t.seq->request->sampling, t.seq->request->prompt, t.seq->output, rng)
                          .token);
  }
  s.update(sampled);
}

std::shared_ptr<Sequence> make_seq(uint64_t id, std::vector<int32_t> prompt, int n_keep) {
  auto req = std::make_shared<GenerationRequest>();
  req->prompt = std::move(prompt);
  req->sampling.temperature = 0;
  req->stop.max_tokens = 1000;
  req->stop.ignore_eos = true;
  auto seq = std::make_shared<Sequence>();
  seq->id = id;
  seq->request = req;
  seq->tokens = req->prompt;
  seq->n_keep = n_keep;
  return seq;
}

}  // namespace

TEST_CASE("context shift re-ropes K in place, keeps V, and leaves shared blocks alone") {
  const auto file = tiny_model_file();
  for (GgmlType kv_type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    const double tol = kv_type == GgmlType::F32 ? 2e-5 : kv_type == GgmlType::F16 ? 4e-3 : 1e-2;
    INFO("kv type " << ggml_type_info(kv_type).name);
    auto model = load_model(file, 256);
    const int B = 16;
    model->init_kv_cache(64, B, kv_type);
    KvCacheManager kv(64, B);
    SchedulerConfig sc;
    sc.max_batch_tokens = 256;
    sc.max_seqs = 4;
    sc.ctx_limit = 96;
    Scheduler s(sc, kv);

    // X: an 80-token prompt; Y: the same prompt plus 10 tokens, admitted after X's prompt is
    // cached, so Y shares X's five full blocks and reaches the context limit first.
    const auto p = random_tokens(80, 11);
    auto x = make_seq(1, p, 16);
    auto y_prompt = p;
    for (int t : random_tokens(10, 12)) y_prompt.push_back(t);
    auto y = make_seq(2, y_prompt, 16);
    s.add(x);
    run_step(s, *model, s.schedule());
    s.add(y);

    StepPlan plan;
    for (int i = 0; i < 20; ++i) {
      plan = s.schedule();
      if (!plan.k_shifts.empty()) break;
      run_step(s, *model, plan);
    }
    REQUIRE(plan.k_shifts.size() == 3);
    CHECK(y->n_shifts == 1);
    CHECK(x->n_shifts == 0);
    CHECK(y->cached_prompt_tokens == 80);
    // n_keep 16; 80 tokens beyond it -> drop 40 rounded down to whole blocks: 32.
    for (const auto& k : plan.k_shifts) CHECK(k.delta == -32);
    REQUIRE(plan.block_copies.size() == 2);
    const auto& xt = kv.block_table(x->id);
    CHECK(plan.block_copies[0].src == xt[3]);
    CHECK(plan.block_copies[1].src == xt[4]);
    CHECK(plan.k_shifts[0].block == plan.block_copies[0].dst);
    CHECK(plan.k_shifts[1].block == plan.block_copies[1].dst);

    // Before the step: the shifted blocks' sources and every block of X.
    std::map<int, BlockData> before;
    before[plan.block_copies[0].src] = read_block(*model, plan.block_copies[0].src, B);
    before[plan.block_copies[1].src] = read_block(*model, plan.block_copies[1].src, B);
    before[plan.k_shifts[2].block] = read_block(*model, plan.k_shifts[2].block, B);
    std::map<int, BlockData> x_before;
    for (int b : xt) x_before[b] = read_block(*model, b, B);
    const std::vector<int32_t> x_table = xt;

    run_step(s, *model, plan);

    const ModelConfig& c = model->config();
    const int hd = c.head_dim, n_rot = c.n_rot;
    const std::pair<int, int> shifted[3] = {{plan.block_copies[0].src, plan.k_shifts[0].block},
                                            {plan.block_copies[1].src, plan.k_shifts[1].block},
                                            {plan.k_shifts[2].block, plan.k_shifts[2].block}};
    double max_err = 0;
    for (const auto& [src, dst] : shifted) {
      const BlockData& old = before.at(src);
      const BlockData now = read_block(*model, dst, B);
      for (int l = 0; l < c.n_layers; ++l) {
        CHECK(now.v[l] == old.v[l]);
        for (int t = 0; t < B; ++t) {
          for (int h = 0; h < c.n_kv_heads; ++h) {
            const float* k0 = old.k[l].data() + (static_cast<size_t>(t) * c.n_kv_heads + h) * hd;
            const float* k1 = now.k[l].data() + (static_cast<size_t>(t) * c.n_kv_heads + h) * hd;
            // Q8_0's error scales with its group's largest value (the head's, at most sqrt(2)
            // times the old head's after a rotation), not with each value's own.
            double head_max = 0;
            for (int i = 0; i < hd; ++i) head_max = std::max(head_max, std::abs(double(k0[i])));
            for (int i = 0; i < hd; ++i) {
              double expect = k0[i];
              if (i < n_rot) {  // llama pairs (2j, 2j+1)
                const int j = i / 2;
                const double theta = -32.0 * c.rope_freq_scale * std::pow(c.rope_freq_base, -2.0 * j / n_rot);
                const double a = k0[2 * j], b = k0[2 * j + 1];
                expect = i % 2 == 0 ? a * std::cos(theta) - b * std::sin(theta)
                                    : a * std::sin(theta) + b * std::cos(theta);
              }
              const double err =
                  std::abs(k1[i] - expect) / (1.0 + (kv_type == GgmlType::Q8_0 ? head_max : std::abs(expect)));
              max_err = std::max(max_err, err);
            }
          }
        }
      }
    }
    INFO("max relative K error " << max_err);
    CHECK(max_err <= tol);
    CHECK(max_err > 0);  // the K really moved

    // X's blocks are untouched, except the slot X wrote this step.
    const int x_written = x->num_computed - 1;
    for (size_t bi = 0; bi < x_table.size(); ++bi) {
      if (static_cast<int>(bi) == x_written / B) continue;
      const BlockData now = read_block(*model, x_table[bi], B);
      for (int l = 0; l < c.n_layers; ++l) {
        CHECK(now.k[l] == x_before.at(x_table[bi]).k[l]);
        CHECK(now.v[l] == x_before.at(x_table[bi]).v[l]);
      }
    }

    // Both keep generating past the shift.
    for (int i = 0; i < 40; ++i) run_step(s, *model, s.schedule());
    CHECK(y->status == SeqStatus::Running);
    CHECK(x->n_shifts >= 1);
    s.finish(x, FinishReason::Abort);
    s.finish(y, FinishReason::Abort);
    CHECK(kv.pool().stats().used == 0);
  }
}
