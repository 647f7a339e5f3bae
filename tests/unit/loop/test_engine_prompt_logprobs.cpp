// Prompt logprobs (GenerationRequest::prompt_logprobs) through LlmEngine on a tiny random-weight
// model (CPU backend): values against log-softmax of Model::forward's logits computed here, and
// bit-identical results whatever the request's surroundings: prefix caching on or off, a cached
// or pinned prefix, chunked prefill, 15 batch mates, preemption with recompute, n > 1. A
// generated token's logprob equals the prompt logprob of the same token read back.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/loop/engine.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

GenerationRequest request(int prompt_len, uint64_t seed, int top_n, int max_tokens = 2) {
  GenerationRequest r;
  r.prompt = random_tokens(prompt_len, seed);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  r.prompt_logprobs = top_n;
  return r;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// What one choice received: its prompt logprobs (as bit patterns and top ids) and its output.
struct Got {
  std::vector<int32_t> prompt_tokens;
  std::vector<uint32_t> prompt_bits;
  std::vector<std::vector<int32_t>> prompt_top;
  std::vector<std::vector<uint32_t>> prompt_top_bits;
  int prompt_deltas = 0;  // deltas that carried prompt logprobs
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::None;
  bool operator==(const Got& o) const {
    return prompt_tokens == o.prompt_tokens && prompt_bits == o.prompt_bits && prompt_top == o.prompt_top &&
           prompt_top_bits == o.prompt_top_bits && tokens == o.tokens;
  }
};

struct Result {
  std::vector<Got> choices;
  Usage usage;
};

Result drain(RequestStream& s, int n) {
  Result r;
  r.choices.resize(static_cast<size_t>(n));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!s.done()) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("request did not finish in time");
    auto d = s.next(std::chrono::milliseconds(100));
    if (!d) continue;
    Got& g = r.choices.at(static_cast<size_t>(d->index));
    if (!d->prompt_logprobs.empty()) ++g.prompt_deltas;
    for (const auto& lp : d->prompt_logprobs) {
      g.prompt_tokens.push_back(lp.token);
      g.prompt_bits.push_back(bits(lp.logprob));
      std::vector<int32_t> top;
      std::vector<uint32_t> top_bits;
      for (const auto& t : lp.top) {
        top.push_back(t.token);
        top_bits.push_back(bits(t.logprob));
      }
      g.prompt_top.push_back(top);
      g.prompt_top_bits.push_back(top_bits);
    }
    g.tokens.insert(g.tokens.end(), d->tokens.begin(), d->tokens.end());
    for (const auto& lp : d->logprobs) g.logprobs.push_back(lp.logprob);
    if (d->finish != FinishReason::None) g.finish = d->finish;
  }
  r.usage = s.usage();
  return r;
}

// Runs `reqs` together on a fresh engine after `warmup` (one by one); returns their results.
std::vector<Result> run(const EngineConfig& cfg, const std::vector<GenerationRequest>& reqs,
                        EngineStats* stats = nullptr, const std::vector<GenerationRequest>& warmup = {}) {
  auto model = load_model(tiny_model(), cfg.max_batch_tokens);
  LlmEngine engine(*model, nullptr, cfg);
  REQUIRE((cfg.system_prompt.empty() || engine.wait_system_prompt()));
  for (const auto& w : warmup) drain(*submit_or_throw(engine, w), w.n);
  const auto streams = submit_all(engine, reqs);
  std::vector<Result> out;
  for (size_t i = 0; i < streams.size(); ++i) out.push_back(drain(*streams[i], reqs[i].n));
  const EngineStats st = wait_idle(engine);
  if (stats) *stats = st;
  return out;
}

// Logits of every position of `prompt`, from one forward pass over a fresh cache.
std::vector<float> direct_logits(const std::vector<int32_t>& prompt) {
  const int B = 16;
  const int n = static_cast<int>(prompt.size());
  const int n_blocks = (n + B - 1) / B;
  auto model = load_model(tiny_model(), n);
  model->init_kv_cache(n_blocks, B);
  const StepPlan plan = whole_prompt_plan(prompt, B, /*logits=*/true);
  std::vector<float> logits;
  model->forward(plan, logits);
  return logits;
}

}  // namespace

TEST_CASE("prompt logprobs equal log-softmax of Model::forward's logits") {
  const int vocab = load_model(tiny_model(), 8)->config().vocab_size;
  GenerationRequest r = request(70, 11, 3);
  r.n = 2;
  const std::vector<float> logits = direct_logits(r.prompt);
  auto res = run(tiny_engine_config(64), {r});
  REQUIRE(res[0].choices.size() == 2);
  for (const Got& g : res[0].choices) {
    CHECK(g.prompt_deltas == 1);  // all of them, once, on the choice's first delta
    REQUIRE(g.prompt_tokens.size() == r.prompt.size() - 1);
    CHECK(g.finish == FinishReason::Length);
    CHECK(g.tokens.size() == 2);
  }
  CHECK(res[0].choices[0] == res[0].choices[1]);
  CHECK(res[0].usage.prompt_tokens == 70);

  const Got& g = res[0].choices[0];
  for (size_t i = 1; i < r.prompt.size(); ++i) {
    INFO("prompt token " << i);
    const float* row = logits.data() + (i - 1) * static_cast<size_t>(vocab);
    double mx = row[0];
    for (int v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    const double lse = mx + std::log(sum);
    float got;
    std::memcpy(&got, &g.prompt_bits[i - 1], 4);
    CHECK(g.prompt_tokens[i - 1] == r.prompt[i]);
    CHECK(got == Approx(row[r.prompt[i]] - lse).margin(1e-5));
    CHECK(got <= 0.0f);
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int v = 0; v < vocab; ++v) order[static_cast<size_t>(v)] = v;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    REQUIRE(g.prompt_top[i - 1].size() == 3);
    for (size_t k = 0; k < 3; ++k) {
      CHECK(g.prompt_top[i - 1][k] == order[k]);
      float top;
      std::memcpy(&top, &g.prompt_top_bits[i - 1][k], 4);
      CHECK(top == Approx(row[order[k]] - lse).margin(1e-5));
    }
  }
}

TEST_CASE("prompt logprobs are bit-identical whatever the cache, chunking, batch or preemption") {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest r = request(20 + (i * 29) % 90, 100 + i, 2, 3 + i % 4);
    if (i % 3 == 2) r.prompt_logprobs = -1;  // batch mates without prompt logprobs
    reqs.push_back(r);
  }
  EngineConfig no_cache = tiny_engine_config(256);
  no_cache.prefix_caching = false;
  std::vector<Got> alone;
  for (const auto& r : reqs) alone.push_back(run(no_cache, {r})[0].choices[0]);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const size_t want = reqs[i].prompt_logprobs >= 0 ? reqs[i].prompt.size() - 1 : 0;
    REQUIRE(alone[i].prompt_bits.size() == want);
  }
  CHECK(alone[0].prompt_bits != alone[1].prompt_bits);

  {
    INFO("prefix caching on, the same prompt cached by an earlier request");
    GenerationRequest warm = reqs[1];
    warm.prompt_logprobs = -1;
    EngineStats st;
    auto res = run(tiny_engine_config(256), {reqs[1], reqs[1]}, &st, {warm});
    for (const auto& r : res) {
      CHECK(r.choices[0] == alone[1]);
      CHECK(r.usage.cached_prompt_tokens == 0);  // computed, not taken from the cache
    }
    CHECK(st.kv_blocks_used == 0);  // the recomputed blocks, cached twice over, all came back
    // Without prompt logprobs the same request does hit the cache.
    auto plain = run(tiny_engine_config(256), {warm}, nullptr, {warm});
    CHECK(plain[0].usage.cached_prompt_tokens > 0);
  }
  {
    INFO("a pinned system prompt the request starts with");
    EngineConfig sys = tiny_engine_config(256);
    sys.system_prompt.assign(reqs[4].prompt.begin(), reqs[4].prompt.begin() + 40);
    auto res = run(sys, {reqs[4]});
    CHECK(res[0].choices[0] == alone[4]);
    CHECK(res[0].usage.cached_prompt_tokens == 0);
  }
  {
    INFO("chunked prefill (7-token budget), alone and all together");
    CHECK(run(tiny_engine_config(256, 7), {reqs[0]})[0].choices[0] == alone[0]);
    auto res = run(tiny_engine_config(256, 7), reqs);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i].choices[0] == alone[i]);
  }
  {
    INFO("all 16 together");
    auto res = run(tiny_engine_config(256), reqs);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i].choices[0] == alone[i]);
  }
  {
    INFO("preempted and resumed (a 12-block cache, 24-token steps)");
    EngineStats st;
    EngineConfig small = tiny_engine_config(12, 24);
    small.max_step_ms = -1;  // whole 24-token chunks beside decodes (timed chunks may not preempt)
    // The 16 may not overlap (the engine runs while they arrive); this one preempts anyway.
    GenerationRequest pressure = preempting_request(12, 4242);
    pressure.prompt_logprobs = 2;
    std::vector<GenerationRequest> batch = {pressure};
    batch.insert(batch.end(), reqs.begin(), reqs.end());
    auto res = run(small, batch, &st);
    CHECK(st.preemptions > 0);
    for (int c = 0; c < pressure.n; ++c)
      CHECK(res[0].choices[size_t(c)] == run(no_cache, {choice_alone(pressure, c)})[0].choices[0]);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i + 1].choices[0] == alone[i]);
    CHECK(st.kv_blocks_used == 0);
  }
}

TEST_CASE("a generated token's logprob equals its prompt logprob when the text is read back") {
  GenerationRequest gen = request(33, 7, 0, 12);
  gen.prompt_logprobs = -1;
  gen.sampling.logprobs = 0;
  const Got g = run(tiny_engine_config(64), {gen})[0].choices[0];
  REQUIRE(g.tokens.size() == 12);

  GenerationRequest echo = request(33, 7, 0, 1);
  echo.prompt.insert(echo.prompt.end(), g.tokens.begin(), g.tokens.end());
  const Got e = run(tiny_engine_config(64), {echo})[0].choices[0];
  REQUIRE(e.prompt_bits.size() == 33 + 12 - 1);
  for (size_t k = 0; k < g.tokens.size(); ++k) {
    INFO("generated token " << k);
    const size_t at = 33 + k - 1;  // entry i scores prompt token i + 1
    CHECK(e.prompt_tokens[at] == g.tokens[k]);
    CHECK(e.prompt_bits[at] == bits(g.logprobs[k]));
  }
}
