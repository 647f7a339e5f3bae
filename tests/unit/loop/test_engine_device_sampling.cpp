// Sampling on the backend, without a GPU: a test double of a backend that can sample (the CPU
// backend's ops plus the backend draw from tests/support/draw_reference.h: masks, token edits,
// the GPU rule, logprobs; counting its draws) under Model::forward's sampling overload and under
// LlmEngine. Checks that the draws and host logits land on the right rows (chunking, reordering,
// one row drawn several times), that every request is sampled on the backend (logprobs,
// penalties, logit_bias and grammars included) with greedy ones bit-identical to the plain CPU
// engine (tokens and logprobs), and that a mixed batch gives every request what it gets alone.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <set>
#include <thread>

#include "engine/loop/engine.h"
#include "engine_test_util.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/draw_reference.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

struct DrawCounters {
  std::atomic<int> draws{0};     // tokens drawn by the backend
  std::atomic<int> steps{0};     // begin_sampling calls
  std::atomic<int> finishes{0};  // finish_sampling calls
};

// The CPU backend (its tensors are host memory) plus sampling by the reference rule.
class SamplingCpuBackend final : public Backend {
 public:
  SamplingCpuBackend(std::shared_ptr<DrawCounters> counters, int chunk_rows)
      : counters_(std::move(counters)), chunk_rows_(chunk_rows) {}

  std::string name() const override { return "cpu+sampling (test double)"; }
  Tensor upload_weight(const void* d, GgmlType t, int64_t r, int64_t c) override { return cpu_.upload_weight(d, t, r, c); }
  Tensor alloc(int64_t rows, int64_t cols) override { return cpu_.alloc(rows, cols); }
  size_t kv_block_bytes(const KvCacheConfig& cfg) const override { return cpu_.kv_block_bytes(cfg); }
  void init_kv_cache(const KvCacheConfig& cfg) override { cpu_.init_kv_cache(cfg); }
  void begin_step(const StepPlan& plan) override { cpu_.begin_step(plan); }
  void apply_cache_edits(const RopeConfig& rope) override { cpu_.apply_cache_edits(rope); }
  void embed(const Tensor& table, Tensor& out) override { cpu_.embed(table, out); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, int64_t n) override { cpu_.rms_norm(x, w, eps, out, n); }
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override { cpu_.matmul(w, x, out, n); }
  void add_bias(Tensor& x, const Tensor& bias, int64_t n) override { cpu_.add_bias(x, bias, n); }
  void add(Tensor& x, const Tensor& y, int64_t n) override { cpu_.add(x, y, n); }
  void silu_mul(const Tensor& g, const Tensor& u, Tensor& out, int64_t n) override { cpu_.silu_mul(g, u, out, n); }
  void rope(Tensor& x, int n_heads, const RopeConfig& rope) override { cpu_.rope(x, n_heads, rope); }
  void store_kv(int layer, const Tensor& k, const Tensor& v) override { cpu_.store_kv(layer, k, v); }
  void attention(int layer, const Tensor& q, Tensor& out, int nh, int nkv, int hd, float scale) override {
    cpu_.attention(layer, q, out, nh, nkv, hd, scale);
  }
  void gather_logit_rows(const Tensor& x, Tensor& out) override { cpu_.gather_logit_rows(x, out); }
  void read_kv_block(int layer, int block, float* k, float* v) override { cpu_.read_kv_block(layer, block, k, v); }
  void write_kv_block(int layer, int block, const float* k, const float* v) override { cpu_.write_kv_block(layer, block, k, v); }
  void read(const Tensor& x, int64_t rows, float* host) override { cpu_.read(x, rows, host); }

  bool can_sample() const override { return true; }
  int logits_chunk_rows() const override { return chunk_rows_; }
  void begin_sampling(const std::vector<SampleRequest>& draws) override {
    for (size_t i = 1; i < draws.size(); ++i)
      if (draws[i - 1].row > draws[i].row) throw std::logic_error("draws not sorted by row");
    draws_ = draws;
    ids_.assign(draws.size(), -1);
    lps_.assign(draws.size(), DrawLogprobs{});
    ++counters_->steps;
  }
  void sample(const Tensor& logits, int64_t row_base, int64_t first, int64_t n) override {
    for (int64_t i = first; i < first + n; ++i) {
      const SampleRequest& d = draws_.at(static_cast<size_t>(i));
      const int64_t r = d.row - row_base;
      if (r < 0 || r >= logits.rows) throw std::logic_error("draw outside the logits chunk");
      const ReferenceDraw got = reference_draw(static_cast<const float*>(logits.data) + r * logits.cols,
                                               static_cast<int>(logits.cols), d);
      ids_[static_cast<size_t>(i)] = got.token;
      DrawLogprobs& lp = lps_[static_cast<size_t>(i)];
      lp.logprob = got.logprobs.logprob;
      lp.n_top = static_cast<int32_t>(got.logprobs.top.size());
      for (int k = 0; k < lp.n_top; ++k) {
        lp.top_id[k] = got.logprobs.top[static_cast<size_t>(k)].token;
        lp.top_logprob[k] = got.logprobs.top[static_cast<size_t>(k)].logprob;
      }
      ++counters_->draws;
    }
  }
  void finish_sampling(int32_t* ids, DrawLogprobs* logprobs) override {
    for (int32_t id : ids_)
      if (id < 0) throw std::logic_error("a draw was never sampled");
    std::copy(ids_.begin(), ids_.end(), ids);
    for (size_t i = 0; i < draws_.size(); ++i)
      if (draws_[i].logprobs >= 0) logprobs[i] = lps_[i];
    ++counters_->finishes;
  }

 private:
  CpuBackend cpu_{1};
  std::shared_ptr<DrawCounters> counters_;
  int chunk_rows_;
  std::vector<SampleRequest> draws_;
  std::vector<int32_t> ids_;
  std::vector<DrawLogprobs> lps_;
};

// A model on the plain CPU backend (counters == nullptr) or on the sampling double.
std::unique_ptr<Model> make_model(std::shared_ptr<DrawCounters> counters, int chunk_rows = 64) {
  if (!counters) return load_model(tiny_model(), 256);
  return std::make_unique<Model>(tiny_model(), std::make_unique<SamplingCpuBackend>(counters, chunk_rows), 256);
}

GenerationRequest request(int prompt_len, uint64_t seed, int max_tokens = 10) {
  GenerationRequest r;
  r.prompt = random_tokens(prompt_len, seed);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

GenerationRequest seeded(int prompt_len, uint64_t seed) {
  GenerationRequest r = request(prompt_len, seed);
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.top_k = 40;
  r.sampling.min_p = 0.01f;
  r.sampling.seed = 500 + seed;
  return r;
}

// Runs `reqs` concurrently on a fresh engine over `model` (a small token budget chunks prompts).
std::vector<RequestResult> run(Model& model, const std::vector<GenerationRequest>& reqs, int max_batch_tokens = 256) {
  LlmEngine engine(model, nullptr, tiny_engine_config(128, max_batch_tokens));
  const auto streams = submit_all(engine, reqs);
  std::vector<RequestResult> out;
  for (size_t i = 0; i < streams.size(); ++i) out.push_back(collect(*streams[i], reqs[i].n));
  return out;
}

int total_tokens(const std::vector<RequestResult>& res) {
  int n = 0;
  for (const auto& r : res)
    for (const auto& c : r.choices) n += static_cast<int>(c.tokens.size());
  return n;
}

// A plan of independent single-sequence prefills (tokens of each are its own prompt).
StepPlan prefill_plan(const std::vector<std::vector<int32_t>>& prompts, int block_size) {
  StepPlan p;
  int next_block = 0;
  for (size_t si = 0; si < prompts.size(); ++si) {
    const auto& toks = prompts[si];
    SeqInStep s;
    s.seq_id = si;
    s.first_token = p.n_tokens();
    s.n_tokens = static_cast<int32_t>(toks.size());
    s.n_past = 0;
    s.block_table_offset = static_cast<int32_t>(p.block_tables.size());
    s.n_blocks = static_cast<int32_t>((toks.size() + block_size - 1) / block_size);
    for (int b = 0; b < s.n_blocks; ++b) p.block_tables.push_back(next_block++);
    for (size_t i = 0; i < toks.size(); ++i) {
      p.tokens.push_back(toks[i]);
      p.positions.push_back(static_cast<int32_t>(i));
      p.slots.push_back(p.block_tables[static_cast<size_t>(s.block_table_offset) + i / block_size] * block_size +
                        static_cast<int32_t>(i % block_size));
      p.token_seq.push_back(static_cast<int32_t>(si));
    }
    p.seqs.push_back(s);
    p.logit_rows.push_back(p.n_tokens() - 1);
  }
  return p;
}

}  // namespace

TEST_CASE("Model::forward with draws: ids by the rule, host logits of the other rows, any chunking") {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 7; ++i) prompts.push_back(random_tokens(3 + 5 * i % 11, 70 + i));
  const StepPlan plan = prefill_plan(prompts, 16);
  auto plain = make_model(nullptr);
  plain->init_kv_cache(64, 16);
  std::vector<float> logits;
  plain->forward(plan, logits);
  const int vocab = plain->config().vocab_size;

  // Rows 1, 4 and 6 drawn (row 4 three times, as the n choices of one prompt), the rest on the host.
  std::vector<SampleRequest> draws;
  for (int32_t row : {4, 1, 4, 6, 4}) {
    SampleRequest d;
    d.row = row;
    d.temperature = row == 1 ? 0.0f : 1.2f;
    d.top_k = row == 6 ? 5 : 0;
    d.seed = 11 + draws.size();
    d.counter = 3;
    draws.push_back(d);
  }
  const std::vector<int32_t> host_rows = {0, 2, 3, 5};
  for (int chunk : {1, 2, 3, 64}) {
    INFO("logits chunk " << chunk);
    auto counters = std::make_shared<DrawCounters>();
    auto model = make_model(counters, chunk);
    model->init_kv_cache(64, 16);
    StepLogits out;
    model->forward(plan, draws, out);
    CHECK(counters->draws == 5);
    CHECK(counters->finishes == 1);
    REQUIRE(out.drawn().size() == draws.size());
    for (size_t i = 0; i < draws.size(); ++i)
      CHECK(out.drawn()[i] == reference_sample(logits.data() + static_cast<size_t>(draws[i].row) * vocab, vocab, draws[i]));
    REQUIRE(out.host_rows() == host_rows.size());
    for (size_t k = 0; k < host_rows.size(); ++k) {
      const std::span<const float> row = out.host_row(host_rows[k]);
      REQUIRE(row.size() == static_cast<size_t>(vocab));
      CHECK(std::equal(row.begin(), row.end(), logits.begin() + static_cast<long>(host_rows[k]) * vocab));
    }
  }
  // The draws are not all the same token: the check above compares something.
  std::set<int32_t> distinct;
  for (size_t i = 0; i < draws.size(); ++i)
    distinct.insert(reference_sample(logits.data() + static_cast<size_t>(draws[i].row) * vocab, vocab, draws[i]));
  CHECK(distinct.size() >= 2);

  auto model = make_model(nullptr);
  model->init_kv_cache(64, 16);
  StepLogits out;
  CHECK_THROWS_AS(model->forward(plan, draws, out), std::logic_error);  // the CPU backend cannot sample
}

TEST_CASE("engine: simple requests are sampled on the backend; greedy ones match the host's argmax") {
  const std::vector<GenerationRequest> reqs = {request(20, 1), seeded(33, 2), request(5, 3), seeded(17, 4)};
  auto counters = std::make_shared<DrawCounters>();
  auto model = make_model(counters, 2);
  const auto dev = run(*model, reqs);
  CHECK(counters->draws == total_tokens(dev));
  CHECK(total_tokens(dev) == 40);
  CHECK(counters->steps == counters->finishes);

  // Greedy: the same logits and the same rule (argmax, lowest id) as the plain CPU engine.
  auto plain = make_model(nullptr);
  const auto host = run(*plain, reqs);
  CHECK(dev[0].choices[0].tokens == host[0].choices[0].tokens);
  CHECK(dev[2].choices[0].tokens == host[2].choices[0].tokens);
  // Seeded: the GPU rule's Philox draws, not the host Rng's (documented in engine.h).
  CHECK(dev[1].choices[0].tokens != host[1].choices[0].tokens);
  CHECK(std::set<int32_t>(dev[1].choices[0].tokens.begin(), dev[1].choices[0].tokens.end()).size() >= 3);
}

TEST_CASE("engine: logprobs, penalties and logit_bias are drawn on the backend; greedy ones equal the CPU engine") {
  std::vector<GenerationRequest> reqs;
  GenerationRequest a = seeded(21, 5);
  a.sampling.logprobs = 3;
  reqs.push_back(a);
  GenerationRequest b = seeded(30, 6);
  b.sampling.presence_penalty = 0.5f;
  reqs.push_back(b);
  GenerationRequest c = request(12, 7);
  c.sampling.frequency_penalty = 0.3f;
  c.sampling.presence_penalty = 0.2f;
  c.sampling.logprobs = 5;
  reqs.push_back(c);
  GenerationRequest d = seeded(9, 8);
  d.sampling.repetition_penalty = 1.2f;
  reqs.push_back(d);
  GenerationRequest e = request(14, 9);
  e.sampling.logit_bias[3] = 5.0f;
  e.sampling.logit_bias[200] = -100.0f;
  e.sampling.logprobs = 0;
  reqs.push_back(e);
  GenerationRequest f = request(16, 10);
  f.sampling.repetition_penalty = 1.5f;
  f.sampling.frequency_penalty = 0.7f;
  f.sampling.logit_bias[7] = 2.5f;
  f.sampling.logprobs = 20;
  reqs.push_back(f);

  auto counters = std::make_shared<DrawCounters>();
  auto model = make_model(counters, 2);
  const auto dev = run(*model, reqs);
  CHECK(counters->draws == total_tokens(dev));
  CHECK(total_tokens(dev) == 60);
  auto plain = make_model(nullptr);
  const auto host = run(*plain, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    CHECK(dev[i].choices[0].tokens.size() == 10);
    if (reqs[i].sampling.temperature <= 0.0f) CHECK(dev[i].choices[0] == host[i].choices[0]);  // logprobs too
  }
  CHECK(dev[0].choices[0].logprob_bits.size() == 10);
  // The penalties changed the greedy tokens (the edits reach the backend's draw).
  for (size_t i : {2, 5}) {
    GenerationRequest plain_req = reqs[i];
    plain_req.sampling = SamplingParams{};
    plain_req.sampling.temperature = 0;
    auto m = make_model(std::make_shared<DrawCounters>(), 2);
    CHECK(run(*m, {plain_req})[0].choices[0].tokens != dev[i].choices[0].tokens);
  }
}

TEST_CASE("engine: a constrained request is drawn on the backend with its mask; greedy equals the CPU engine") {
  const auto tok = Tokenizer::from_gguf(tiny_model());
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::JsonSchema;
  c.source = R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
                 "required": ["n", "ok"], "additionalProperties": false})";
  auto run_with = [&](Model& model, const std::vector<GenerationRequest>& base) {
    LlmEngine engine(model, tok.get(), tiny_engine_config(128, 256));
    std::vector<GenerationRequest> reqs = base;
    const auto g = engine.compile_constraint(c);
    for (auto& r : reqs) r.sampling.grammar = g;
    const auto streams = submit_all(engine, reqs);
    std::vector<RequestResult> out;
    for (size_t i = 0; i < streams.size(); ++i) out.push_back(collect(*streams[i], reqs[i].n));
    return out;
  };
  std::vector<GenerationRequest> reqs;
  for (uint64_t s : {21, 22}) {
    GenerationRequest r = request(10, s, 40);
    r.prompt = random_tokens(10, s, 120);
    r.stop.ignore_eos = false;
    r.sampling.logprobs = 2;
    reqs.push_back(r);
  }
  GenerationRequest sampled = seeded(10, 23);
  sampled.prompt = random_tokens(10, 23, 120);
  sampled.stop.max_tokens = 40;
  sampled.stop.ignore_eos = false;
  sampled.n = 2;
  reqs.push_back(sampled);

  auto counters = std::make_shared<DrawCounters>();
  auto model = make_model(counters, 2);
  const auto dev = run_with(*model, reqs);
  CHECK(counters->draws > 0);
  auto plain = make_model(nullptr);
  const auto host = run_with(*plain, reqs);
  for (size_t i = 0; i < 2; ++i) {
    INFO("greedy request " << i << ": " << dev[i].choices[0].text);
    CHECK(dev[i].choices[0] == host[i].choices[0]);
  }
  for (const auto& r : dev)
    for (const auto& ch : r.choices) {
      INFO(ch.text);
      CHECK(ch.finish == FinishReason::Stop);
      const auto j = nlohmann::json::parse(ch.text);
      CHECK(j["n"].is_number_integer());
      CHECK(j["ok"].is_boolean());
    }
}

TEST_CASE("engine: in a mixed batch every request gets what it gets alone (greedy, seeded, n > 1)") {
  std::vector<GenerationRequest> reqs = {request(20, 11), seeded(33, 12), seeded(8, 13), request(40, 14)};
  reqs[2].sampling.logprobs = 1;           // seeded, with logprobs
  reqs[3].sampling.presence_penalty = 0.4f;  // greedy, penalised
  GenerationRequest multi = seeded(25, 15);  // device, 3 choices drawn from one row at first
  multi.n = 3;
  reqs.push_back(multi);
  GenerationRequest late = seeded(50, 16);  // device, prefilled in chunks alongside decodes
  late.stop.max_tokens = 6;
  reqs.push_back(late);

  auto counters = std::make_shared<DrawCounters>();
  auto model = make_model(counters, 3);
  const auto together = run(*model, reqs, 32);
  CHECK(counters->draws == total_tokens(together));  // every token on the backend

  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    auto alone_model = make_model(std::make_shared<DrawCounters>(), 64);
    const auto alone = run(*alone_model, {reqs[i]});
    REQUIRE(alone[0].choices.size() == together[i].choices.size());
    for (size_t c = 0; c < alone[0].choices.size(); ++c) CHECK(together[i].choices[c] == alone[0].choices[c]);
  }
  // The n = 3 choices differ (different seeds) and choice 0 is the n = 1 request.
  CHECK(together[4].choices[0].tokens != together[4].choices[1].tokens);
  CHECK(together[4].choices[1].tokens != together[4].choices[2].tokens);
  GenerationRequest one = multi;
  one.n = 1;
  auto one_model = make_model(std::make_shared<DrawCounters>(), 64);
  CHECK(run(*one_model, {one})[0].choices[0] == together[4].choices[0]);
  // The greedy penalised request is the plain CPU engine's, bit for bit.
  auto plain = make_model(nullptr);
  const auto host = run(*plain, {reqs[3]});
  CHECK(together[3].choices[0] == host[0].choices[0]);
}

// Speculated requests are drawn on the backend too: one draw per node of each verified tree,
// the node's counter and penalties counting the drafted tokens above it as drawn, so the
// acceptance walk keeps the tokens a request draws without speculation. Requests whose prompts
// repeat a phrase (the n-gram drafter proposes its continuation): greedy, seeded (temperature
// 0.2), greedy with frequency and presence penalties and 2 top logprobs (its logprobs change
// when a node's penalties miss the drafted tokens above it), and one opted out of speculation.
TEST_CASE("engine: speculated requests are drawn on the backend, the tokens they draw without speculation") {
  auto phrased = [](GenerationRequest r, uint64_t seed) {
    const std::vector<int32_t> phrase = random_tokens(7, seed);
    r.prompt.clear();
    for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.stop.max_tokens = 24;
    return r;
  };
  GenerationRequest penalised = phrased(request(0, 33), 33);
  penalised.sampling.frequency_penalty = 0.3f;
  penalised.sampling.presence_penalty = 0.2f;
  penalised.sampling.logprobs = 2;
  GenerationRequest cool = phrased(seeded(0, 32), 32);
  cool.sampling.temperature = 0.2f;
  GenerationRequest opted_out = phrased(request(0, 34), 34);
  opted_out.speculative = false;
  const std::vector<GenerationRequest> reqs = {phrased(request(0, 31), 31), cool, penalised, opted_out};
  auto run_with = [&](Model& model, SpeculativeMode mode, EngineStats* stats) {
    EngineConfig cfg = tiny_engine_config(128, 256);
    cfg.speculative = mode;
    cfg.spec_cost_gate = false;  // the tiny model's steps cost per token: the gate would not draft
    LlmEngine engine(model, nullptr, cfg);
    const auto streams = submit_all(engine, reqs);
    std::vector<RequestResult> out;
    for (size_t i = 0; i < streams.size(); ++i) out.push_back(collect(*streams[i], reqs[i].n));
    *stats = wait_idle(engine);
    return out;
  };
  auto spec_counters = std::make_shared<DrawCounters>(), plain_counters = std::make_shared<DrawCounters>();
  auto spec_model = make_model(spec_counters, 2), plain_model = make_model(plain_counters, 2);
  EngineStats spec_st, plain_st, host_st;
  const auto spec = run_with(*spec_model, SpeculativeMode::Ngram, &spec_st);
  const auto plain = run_with(*plain_model, SpeculativeMode::None, &plain_st);
  INFO("drafted " << spec_st.spec_drafted << ", accepted " << spec_st.spec_accepted << ", draws "
                  << spec_counters->draws << " against " << plain_counters->draws);
  CHECK(spec_st.spec_accepted >= 4);
  CHECK(plain_counters->draws == 4 * 24);
  CHECK(spec_counters->draws > plain_counters->draws);  // every node of a tree is drawn
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    CHECK(spec[i].choices[0] == plain[i].choices[0]);
  }
  // Greedy: the plain CPU engine's tokens and logprobs, speculating on the host.
  auto host_model = make_model(nullptr);
  const auto host = run_with(*host_model, SpeculativeMode::Ngram, &host_st);
  CHECK(spec[0].choices[0] == host[0].choices[0]);
}
