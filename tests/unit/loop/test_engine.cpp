// LlmEngine end to end on a tiny random-weight model (CPU backend): batch invariance bit for
// bit (alone / with 15 others, on 1 and 3 kernel threads / chunked / prefix hit / preempted and
// resumed; greedy and seeded), prefix sharing of a pinned system prompt, context shift over 1000
// tokens, n > 1, aborts, submit errors, and no leaked blocks. The cache behaviours (invariance, prefix sharing,
// preemption, shift) run with an f16 and a q8_0 KV cache (Catch2 GENERATE: one run each).
#include <catch2/catch.hpp>

#include <ctime>
#include <set>
#include <thread>

#include "engine/loop/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

GenerationRequest make_request(int prompt_len, int max_tokens, uint64_t seed, bool sampled) {
  GenerationRequest r;
  r.prompt = random_tokens(prompt_len, seed);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.logprobs = 2;
  if (sampled) {
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1000 + seed;
  } else {
    r.sampling.temperature = 0;
  }
  return r;
}

// Runs `reqs` concurrently on a fresh engine; returns their results and the final stats.
std::vector<RequestResult> run(const EngineConfig& cfg, const std::vector<GenerationRequest>& reqs,
                               EngineStats* stats = nullptr, const std::vector<GenerationRequest>& warmup = {},
                               int threads = 1) {
  auto model = load_model(tiny_model(), cfg.max_batch_tokens, threads);
  LlmEngine engine(*model, nullptr, cfg);
  for (const auto& w : warmup) collect(*submit_or_throw(engine, w));
  const auto streams = submit_all(engine, reqs);
  std::vector<RequestResult> out;
  for (size_t i = 0; i < streams.size(); ++i) out.push_back(collect(*streams[i], reqs[i].n));
  // Let the engine settle so that the caller can check every block came back.
  const EngineStats st = wait_idle(engine);
  if (stats) *stats = st;
  return out;
}

}  // namespace

TEST_CASE("batch invariance: alone, with 15 others, chunked, prefix hit, preempted") {
  const GgmlType kv = GENERATE(GgmlType::F16, GgmlType::Q8_0);
  const auto config = [kv](int kv_blocks, int max_batch_tokens = 512) {
    return tiny_engine_config(kv_blocks, max_batch_tokens, 16, kv);
  };
  for (bool sampled : {false, true}) {
    INFO("sampled " << sampled << ", kv " << ggml_type_info(kv).name);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 16; ++i) reqs.push_back(make_request(5 + (i * 37) % 80, 12 + i % 9, i, sampled));

    // Each request alone, unchunked: the reference.
    std::vector<ChoiceResult> alone;
    for (const auto& r : reqs) alone.push_back(run(config(256), {r})[0].choices[0]);
    for (const auto& a : alone) {
      REQUIRE(a.finish == FinishReason::Length);
      REQUIRE(a.logprob_bits.size() == a.tokens.size());
      // The model is random but not degenerate: outputs vary, so equality means something.
      CHECK(std::set<int32_t>(a.tokens.begin(), a.tokens.end()).size() >= 3);
    }
    CHECK(alone[0].tokens != alone[1].tokens);

    {
      INFO("all 16 together");
      auto res = run(config(256), reqs);
      for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i].choices[0] == alone[i]);
    }
    {
      INFO("all 16 together on 3 kernel threads (a step's host draws run on them at once)");
      auto res = run(config(256), reqs, nullptr, {}, 3);
      for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i].choices[0] == alone[i]);
    }
    {
      INFO("chunked prefill (7-token budget), alone and together");
      for (size_t i = 0; i < 3; ++i) CHECK(run(config(256, 7), {reqs[i]})[0].choices[0] == alone[i]);
      auto res = run(config(256, 7), reqs);
      for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i].choices[0] == alone[i]);
    }
    {
      INFO("prefix hit");
      // A request sharing the first 40 tokens of request 1 leaves two full blocks cached.
      REQUIRE(reqs[1].prompt.size() >= 40);
      GenerationRequest warm = make_request(60, 3, 99, false);
      std::copy(reqs[1].prompt.begin(), reqs[1].prompt.begin() + 40, warm.prompt.begin());
      EngineStats st;
      auto res = run(config(256), {reqs[1]}, &st, {warm});
      CHECK(res[0].usage.cached_prompt_tokens == 32);
      CHECK(res[0].choices[0] == alone[1]);
    }
    {
      INFO("preempted and resumed (a 14-block cache)");
      EngineStats st;
      EngineConfig small = config(14);
      small.max_step_ms = -1;  // whole chunks beside decodes (timed chunks may not preempt)
      // The 16 may not overlap (the engine runs while they arrive); this one preempts anyway.
      const GenerationRequest pressure = preempting_request(14, 4242);
      std::vector<GenerationRequest> batch = {pressure};
      batch.insert(batch.end(), reqs.begin(), reqs.end());
      auto res = run(small, batch, &st);
      CHECK(st.preemptions > 0);
      for (int c = 0; c < pressure.n; ++c)
        CHECK(res[0].choices[size_t(c)] == run(config(256), {choice_alone(pressure, c)})[0].choices[0]);
      for (size_t i = 0; i < reqs.size(); ++i) CHECK(res[i + 1].choices[0] == alone[i]);
    }
  }
}

TEST_CASE("preempting_request is preempted even alone, and each choice gives its output alone") {
  // What the preemption checks of the engine tests rely on: the pressure needs no batch mates,
  // so no step timing can avoid it.
  for (int kv_blocks : {10, 12, 14, 24}) {
    INFO(kv_blocks << " blocks");
    const GenerationRequest r = preempting_request(kv_blocks, 77);
    EngineStats st;
    EngineConfig small = tiny_engine_config(kv_blocks);
    small.max_step_ms = -1;
    auto res = run(small, {r}, &st);
    CHECK(st.preemptions > 0);
    CHECK(st.kv_blocks_used == 0);
    for (int c = 0; c < r.n; ++c) {
      const ChoiceResult alone = run(tiny_engine_config(256), {choice_alone(r, c)})[0].choices[0];
      CHECK(alone.tokens.size() == (size_t)r.stop.max_tokens);
      CHECK(res[0].choices[size_t(c)] == alone);
    }
  }
}

TEST_CASE("a pinned system prompt is prefilled once and shared; outputs equal the unshared run") {
  const auto sys = random_tokens(300, 4242);
  std::vector<GenerationRequest> reqs;
  uint64_t user_tokens = 0;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest r = make_request(5 + i, 6, 500 + i, i % 2 == 1);
    user_tokens += r.prompt.size();
    r.prompt.insert(r.prompt.begin(), sys.begin(), sys.end());
    reqs.push_back(r);
  }
  const GgmlType kv = GENERATE(GgmlType::F16, GgmlType::Q8_0);
  INFO("kv " << ggml_type_info(kv).name);
  EngineConfig shared = tiny_engine_config(512, 64, 16, kv);
  shared.system_prompt = sys;
  EngineConfig unshared = tiny_engine_config(512, 64, 16, kv);
  unshared.prefix_caching = false;

  EngineStats s1, s2;
  auto a = run(shared, reqs, &s1);
  auto b = run(unshared, reqs, &s2);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(a[i].choices[0] == b[i].choices[0]);
    CHECK(a[i].usage.cached_prompt_tokens == 300);
    CHECK(b[i].usage.cached_prompt_tokens == 0);
    CHECK(a[i].usage.prompt_tokens == static_cast<int>(reqs[i].prompt.size()));
  }
  CHECK(s1.prefill_tokens_computed == 300 + user_tokens);  // the system prompt once
  CHECK(s1.prompt_tokens_cached == 16 * 300);
  CHECK(s2.prefill_tokens_computed == 16 * 300 + user_tokens);
  CHECK(s1.kv_blocks_used == 19);  // only the pinned prompt (300 tokens = 19 blocks) is held
  CHECK(s2.kv_blocks_used == 0);

  // The pinned prefix, seen from the engine thread.
  auto model = load_model(tiny_model(), 64);
  LlmEngine engine(*model, nullptr, shared);
  CHECK(engine.wait_system_prompt());
  engine.run_on_engine_thread([](Model&, KvCacheManager& kv) {
    CHECK(kv.pinned_tokens() == 300);
    CHECK(kv.pinned_blocks() == 19);
    CHECK(kv.pool().stats().used == 19);
  });
}

TEST_CASE("context shift: a 256-token context generates 1000 tokens; off -> finish length") {
  const GgmlType kv = GENERATE(GgmlType::F16, GgmlType::Q8_0);
  INFO("kv " << ggml_type_info(kv).name);
  EngineConfig cfg = tiny_engine_config(64, 512, 16, kv);
  cfg.ctx_size = 256;
  GenerationRequest r = make_request(50, 1000, 7, true);
  r.n_keep = 20;
  EngineStats st;
  auto res = run(cfg, {r}, &st);
  CHECK(res[0].choices[0].finish == FinishReason::Length);
  CHECK(res[0].choices[0].tokens.size() == 1000);
  CHECK(st.context_shifts >= 6);
  CHECK(st.kv_blocks_used == 0);

  cfg.context_shift = false;
  res = run(cfg, {r}, &st);
  CHECK(res[0].choices[0].finish == FinishReason::Length);
  CHECK(res[0].choices[0].tokens.size() == 256 - 50 + 1);
  CHECK(st.context_shifts == 0);
}

TEST_CASE("n > 1: choices share the prompt and differ by seed; the same seed reproduces them") {
  GenerationRequest r = make_request(40, 10, 3, true);
  r.n = 3;
  auto a = run(tiny_engine_config(64), {r});
  auto b = run(tiny_engine_config(64), {r});
  REQUIRE(a[0].choices.size() == 3);
  CHECK(a[0].choices[0] == b[0].choices[0]);
  CHECK(a[0].choices[2] == b[0].choices[2]);
  CHECK(a[0].choices[0].tokens != a[0].choices[1].tokens);
  CHECK(a[0].usage.completion_tokens == 30);
  // Choice 0 of an n=3 request equals the n=1 request with the same seed.
  GenerationRequest one = r;
  one.n = 1;
  CHECK(run(tiny_engine_config(64), {one})[0].choices[0] == a[0].choices[0]);
}

TEST_CASE("submit errors, abort and stop token ids") {
  auto model = load_model(tiny_model(), 64);
  EngineConfig cfg = tiny_engine_config(32, 64);
  cfg.ctx_size = 128;
  LlmEngine engine(*model, nullptr, cfg);
  SubmitError err;
  CHECK_FALSE(engine.submit(make_request(128, 4, 1, false), &err));
  CHECK(err.code == "context_length_exceeded");
  CHECK_FALSE(engine.submit(GenerationRequest{}, &err));
  GenerationRequest bad = make_request(4, 4, 1, false);
  bad.prompt[0] = 1 << 20;
  CHECK_FALSE(engine.submit(bad, &err));

  // An endless request is aborted: its stream ends with "abort" and its blocks come back.
  GenerationRequest endless = make_request(20, 100000, 2, false);
  auto s = engine.submit(endless, &err);
  REQUIRE(s);
  auto first = s->next(std::chrono::seconds(30));
  REQUIRE(first);
  s->abort();
  auto res = collect(*s);
  CHECK(res.choices[0].finish == FinishReason::Abort);
  for (int i = 0; i < 200 && engine.stats().kv_blocks_used; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(engine.stats().kv_blocks_used == 0);

  // Stop on the third generated token's id.
  GenerationRequest g = make_request(20, 30, 5, false);
  auto ref = collect(*engine.submit(g, &err));
  REQUIRE(ref.choices[0].tokens.size() == 30);
  g.stop.stop_token_ids = {ref.choices[0].tokens[2]};
  auto stopped = collect(*engine.submit(g, &err));
  CHECK(stopped.choices[0].finish == FinishReason::Stop);
  CHECK(stopped.choices[0].tokens.size() <= 3);
  CHECK(engine.stats().steps > 0);
  CHECK(engine.stats().alive);
}

TEST_CASE("a stop string ends the choice and never reaches the client") {
  const auto tok = Tokenizer::from_gguf(tiny_model());
  auto model = load_model(tiny_model(), 64);
  LlmEngine engine(*model, tok.get(), tiny_engine_config(64, 64));
  GenerationRequest g = make_request(10, 40, 8, false);
  SubmitError err;
  auto ref = collect(*engine.submit(g, &err));
  const ChoiceResult& r = ref.choices[0];
  REQUIRE(r.finish == FinishReason::Length);
  REQUIRE(r.text.size() >= 12);

  // Stop at a string that first appears somewhere in the middle of the text.
  const std::string stop = r.text.substr(r.text.size() / 2, 3);
  const size_t at = r.text.find(stop);
  g.stop.stop = {stop, "\x01never"};
  auto stopped = collect(*engine.submit(g, &err));
  CHECK(stopped.choices[0].finish == FinishReason::Stop);
  CHECK(stopped.choices[0].text == r.text.substr(0, at));
  CHECK(stopped.choices[0].tokens.size() < r.tokens.size());
}

TEST_CASE("a full queue answers queue_full; stats count running and waiting") {
  auto model = load_model(tiny_model(), 64);
  EngineConfig cfg = tiny_engine_config(64, 64, 1);  // one running sequence at a time
  cfg.max_queue = 2;
  LlmEngine engine(*model, nullptr, cfg);
  SubmitError err;
  auto first = engine.submit(make_request(10, 100000, 1, false), &err);
  REQUIRE(first);
  REQUIRE(first->next(std::chrono::seconds(30)));  // running now
  auto second = engine.submit(make_request(10, 5, 2, false), &err);
  auto third = engine.submit(make_request(10, 5, 3, false), &err);
  REQUIRE(second);
  REQUIRE(third);
  CHECK_FALSE(engine.submit(make_request(10, 5, 4, false), &err));
  CHECK(err.code == "queue_full");
  const EngineStats st = engine.stats();
  CHECK(st.running == 1);
  CHECK(st.waiting == 2);
  first->abort();
  CHECK(collect(*second).choices[0].finish == FinishReason::Length);
  CHECK(collect(*third).choices[0].tokens.size() == 5);
}

TEST_CASE("an idle engine sleeps: no steps and (almost) no CPU time") {
  auto model = load_model(tiny_model(), 64);
  LlmEngine engine(*model, nullptr, tiny_engine_config(32, 64));
  SubmitError err;
  collect(*engine.submit(make_request(10, 5, 1, false), &err));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the thread pool park
  const uint64_t steps = engine.stats().steps;
  const std::clock_t c0 = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  CHECK(engine.stats().steps == steps);
  CHECK(cpu_s < 0.05);
  CHECK(engine.stats().alive);
}
