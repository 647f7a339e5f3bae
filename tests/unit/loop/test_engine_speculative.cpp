// Speculative decoding end to end (LlmEngine, CPU backend): greedy output identical to plain
// decoding token for token (n-gram chains and trees, a smaller draft model, the target as its
// own draft; alone and in batches of 16 mixed with requests that opt out), seeded sampling
// reproducing plain sampling's tokens, a chi-square test that speculative and plain sampling
// draw from the same distribution, stories260K's 8 prompts, and no leaked KV blocks (target and
// draft caches).
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/loop/engine.h"
#include "engine_test_util.h"
#include "tests/support/testdata.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

// A prompt that repeats itself (what prompt lookup feeds on): a random phrase, some noise, the
// phrase again and its first half once more.
std::vector<int32_t> echo_prompt(int phrase_len, uint64_t seed, int vocab = 256) {
  const auto phrase = random_tokens(phrase_len, seed, vocab);
  auto p = phrase;
  const auto noise = random_tokens(5, seed + 1000, vocab);
  p.insert(p.end(), noise.begin(), noise.end());
  p.insert(p.end(), phrase.begin(), phrase.end());
  p.insert(p.end(), phrase.begin(), phrase.begin() + phrase_len / 2);
  return p;
}

GenerationRequest request(std::vector<int32_t> prompt, int max_tokens, float temperature = 0,
                          uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.temperature = temperature;
  if (temperature > 0) r.sampling.seed = seed;
  return r;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;  // per request
  EngineStats stats;
  int draft_blocks = 0;  // draft-model blocks in use at the end
};

// Runs `reqs` together on a fresh engine over `file` (and a draft model over `draft`).
Run run(const gguf::GgufFile& file, EngineConfig cfg, const std::vector<GenerationRequest>& reqs,
        const gguf::GgufFile* draft = nullptr) {
  auto model = load_model(file, cfg.max_batch_tokens);
  std::unique_ptr<Model> draft_model;
  if (draft) {
    draft_model = load_model(*draft, cfg.max_batch_tokens);
    cfg.draft_model = draft_model.get();
  }
  LlmEngine engine(*model, nullptr, cfg);
  const auto streams = submit_all(engine, reqs);
  Run out;
  for (size_t i = 0; i < streams.size(); ++i) out.tokens.push_back(collect(*streams[i], reqs[i].n).choices[0].tokens);
  out.stats = wait_idle(engine);
  engine.run_on_engine_thread([&](Model&, KvCacheManager&) { out.draft_blocks = engine.draft_blocks_in_use(); });
  return out;
}

EngineConfig spec_config(SpeculativeMode mode, int tokens = 6, int tree = 1, int kv_blocks = 256) {
  EngineConfig c = tiny_engine_config(kv_blocks);
  c.speculative = mode;
  c.spec_tokens = tokens;
  c.spec_tree = tree;
  // These tests check what speculation does, so it must happen: the cost gate (test_spec_cost)
  // would turn it down for a tiny model whose steps cost per token, not per weight read.
  c.spec_cost_gate = false;
  return c;
}

std::vector<GenerationRequest> echo_requests(int n, float temperature = 0) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < n; ++i)
    reqs.push_back(request(echo_prompt(12 + i % 7, 100 + i), 24 + i % 5, temperature, 500 + i));
  return reqs;
}

// Each request alone on a plain engine: the reference.
std::vector<std::vector<int32_t>> plain_alone(const gguf::GgufFile& f, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : reqs) out.push_back(run(f, tiny_engine_config(256), {r}).tokens[0]);
  return out;
}

// A one-layer dim-32 model (a draft); vocab_size 0: tiny_model's vocabulary, larger: padded.
gguf::GgufFile small_model_file(uint64_t seed, int vocab_size) {
  ModelSpec spec;
  spec.n_layers = 1;
  spec.dim = 32;
  spec.ff_dim = 64;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.type = GgmlType::F32;
  spec.seed = seed;
  spec.vocab_size = vocab_size;
  return gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "small.gguf");
}

void check_no_leaks(const Run& r) {
  CHECK(r.stats.kv_blocks_used == 0);
  CHECK(r.draft_blocks == 0);
}

}  // namespace

TEST_CASE("greedy: n-gram speculation (chain and tree) equals plain decoding, alone and mixed in 16") {
  const auto reqs = echo_requests(16);
  const auto want = plain_alone(tiny_model(), reqs);
  for (int tree : {1, 3}) {
    INFO("spec_tree " << tree);
    uint64_t accepted = 0;
    for (size_t i = 0; i < 4; ++i) {
      const Run r = run(tiny_model(), spec_config(SpeculativeMode::Ngram, 6, tree), {reqs[i]});
      CHECK(r.tokens[0] == want[i]);
      accepted += r.stats.spec_accepted;
      check_no_leaks(r);
    }
    // Random weights still repeat the prompt's phrase often enough for drafts to be accepted.
    CHECK(accepted > 0);
    // All 16 together, every other one opting out.
    auto mixed = reqs;
    for (size_t i = 0; i < mixed.size(); i += 2) mixed[i].speculative = false;
    const Run r = run(tiny_model(), spec_config(SpeculativeMode::Ngram, 6, tree), mixed);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(r.tokens[i] == want[i]);
    CHECK(r.stats.spec_drafted > 0);
    check_no_leaks(r);
    // A cache of 24 blocks for 16 requests: preemption and recompute between verifications.
    // They may not overlap (the engine runs while they arrive): choices that outgrow the cache
    // together, submitted first, preempt the newer ones whatever the timing.
    auto tight_batch = mixed;
    const GenerationRequest pressure = preempting_request(24, 4242);
    tight_batch.insert(tight_batch.begin(), pressure);
    const Run tight = run(tiny_model(), spec_config(SpeculativeMode::Ngram, 6, tree, 24), tight_batch);
    CHECK(tight.tokens[0].size() == (size_t)pressure.stop.max_tokens);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(tight.tokens[i + 1] == want[i]);
    CHECK(tight.stats.preemptions > 0);
    check_no_leaks(tight);
  }
}

TEST_CASE("greedy: n-gram trees over sliding-window, soft-capped attention (gemma2) equal plain decoding") {
  // A window of 8 is far shorter than the prompts: the tree rows go through attention_ext.
  const auto file = tiny_windowed_model_file(8);
  const auto reqs = echo_requests(6);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) want.push_back(run(file, tiny_engine_config(256), {r}).tokens[0]);
  for (int tree : {1, 3}) {
    INFO("spec_tree " << tree);
    const Run r = run(file, spec_config(SpeculativeMode::Ngram, 6, tree), reqs);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(r.tokens[i] == want[i]);
    CHECK(r.stats.spec_drafted > 0);
    check_no_leaks(r);
  }
}

TEST_CASE("greedy: a smaller draft model and the target as its own draft equal plain decoding") {
  const auto small_file = small_model_file(9, 0);
  const auto reqs = echo_requests(16);
  const auto want = plain_alone(tiny_model(), reqs);
  for (const gguf::GgufFile* draft : {&small_file, &tiny_model()}) {
    const bool self = draft == &tiny_model();
    INFO((self ? "draft = target" : "draft = smaller model"));
    for (int tree : {1, 2}) {
      INFO("spec_tree " << tree);
      const Run alone = run(tiny_model(), spec_config(SpeculativeMode::Draft, 4, tree), {reqs[3]}, draft);
      CHECK(alone.tokens[0] == want[3]);
      check_no_leaks(alone);
      // The target drafting for itself is right about its main chain (2 of 4 drafts with two
      // one-token side branches, 4 of 4 without).
      if (self) CHECK(alone.stats.spec_accepted * 10 >= alone.stats.spec_drafted * (tree == 1 ? 9 : 4));
      auto mixed = reqs;
      for (size_t i = 1; i < mixed.size(); i += 3) mixed[i].speculative = false;
      const Run r = run(tiny_model(), spec_config(SpeculativeMode::Draft, 4, tree), mixed, draft);
      for (size_t i = 0; i < reqs.size(); ++i) CHECK(r.tokens[i] == want[i]);
      CHECK(r.stats.spec_drafted > 0);
      check_no_leaks(r);
    }
  }
}

TEST_CASE("a draft model with another vocabulary is refused") {
  const auto f = small_model_file(0, 300);
  auto model = load_model(tiny_model());
  auto draft = load_model(f);
  EngineConfig c = spec_config(SpeculativeMode::Draft);
  c.draft_model = draft.get();
  CHECK_THROWS_AS(LlmEngine(*model, nullptr, c), EngineError);
  c.draft_model = nullptr;
  CHECK_THROWS_AS(LlmEngine(*model, nullptr, c), EngineError);
}

TEST_CASE("seeded sampling: speculation reproduces plain sampling's tokens for the same seeds") {
  auto reqs = echo_requests(16, 0.8f);
  for (size_t i = 0; i < reqs.size(); i += 4) reqs[i].sampling.repetition_penalty = 1.1f;  // penalties see drafts
  const Run plain = run(tiny_model(), tiny_engine_config(256), reqs);
  const Run spec = run(tiny_model(), spec_config(SpeculativeMode::Ngram, 6, 2), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(spec.tokens[i] == plain.tokens[i]);
  CHECK(spec.stats.spec_accepted > 0);
  check_no_leaks(spec);
}

// Pearson's chi-square statistic of homogeneity for two samples over the same categories
// (categories with fewer than 10 draws in all are pooled into one), and its degrees of freedom.
std::pair<double, int> chi_square(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> cells;
  for (const auto& [k, n] : a) cells[k].first += n;
  for (const auto& [k, n] : b) cells[k].second += n;
  std::vector<std::pair<int, int>> pooled;
  std::pair<int, int> rare{0, 0};
  for (const auto& [k, c] : cells) {
    if (c.first + c.second < 10) rare.first += c.first, rare.second += c.second;
    else pooled.push_back(c);
  }
  if (rare.first + rare.second > 0) pooled.push_back(rare);
  double na = 0, nb = 0;
  for (const auto& c : pooled) na += c.first, nb += c.second;
  double x2 = 0;
  for (const auto& c : pooled) {
    const double tot = c.first + c.second;
    const double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
    x2 += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  return {x2, static_cast<int>(pooled.size()) - 1};
}

TEST_CASE("sampling: speculative and plain draws come from the same distribution (chi-square)") {
  // A small effective vocabulary (top_k 6) and a prompt that repeats, so drafts are accepted
  // and rejected often. Plain runs take seeds 0..N-1, speculative ones N..2N-1: independent
  // samples, compared per generated position.
  constexpr int kRuns = 300, kTokens = 5;
  const auto prompt = echo_prompt(10, 77, 256);
  std::vector<GenerationRequest> plain_reqs, spec_reqs;
  for (int i = 0; i < kRuns; ++i) {
    auto r = request(prompt, kTokens, 1.5f, static_cast<uint64_t>(i));
    r.sampling.top_k = 6;
    plain_reqs.push_back(r);
    r.sampling.seed = static_cast<uint64_t>(kRuns + i);
    spec_reqs.push_back(r);
  }
  EngineConfig pc = tiny_engine_config(256);
  EngineConfig sc = spec_config(SpeculativeMode::Ngram, 4, 2);
  const Run plain = run(tiny_model(), pc, plain_reqs);
  const Run spec = run(tiny_model(), sc, spec_reqs);
  CHECK(spec.stats.spec_accepted > 20);
  CHECK(spec.stats.spec_accepted < spec.stats.spec_drafted);  // rejections happen too
  check_no_leaks(spec);
  // Critical values of chi-square at p = 0.001 by degrees of freedom.
  const double crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26,
                         32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31, 43.82, 45.31};
  for (int pos = 0; pos < kTokens; ++pos) {
    std::map<int32_t, int> a, b;
    for (int i = 0; i < kRuns; ++i) {
      ++a[plain.tokens[i].at(pos)];
      ++b[spec.tokens[i].at(pos)];
    }
    const auto [x2, dof] = chi_square(a, b);
    INFO("position " << pos << ": chi2 " << x2 << " with " << dof << " dof");
    REQUIRE(dof >= 1);
    REQUIRE(dof <= 20);
    CHECK(x2 < crit[dof]);
  }
  // Same test, same seeds: not merely the same distribution but the same draws.
  const Run same = run(tiny_model(), sc, plain_reqs);
  CHECK(same.tokens == plain.tokens);
}

TEST_CASE("stories260K: n-gram and self-draft speculation keep the greedy output, alone and in 16", "[testdata]") {
  if (!testing::testdata_available("models/stories260K.expected.json")) return;
  const auto expected = nlohmann::json::parse(std::ifstream(testing::testdata_path("models/stories260K.expected.json")));
  const gguf::GgufFile f = gguf::GgufFile::open(testing::testdata_path("models/stories260K.gguf").string());
  std::vector<GenerationRequest> reqs;
  for (const auto& c : expected["cases"]) reqs.push_back(request(c["prompt_ids"].get<std::vector<int32_t>>(), 64));
  const Run plain = run(f, tiny_engine_config(256), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto want = expected["cases"][i]["greedy_ids"].get<std::vector<int32_t>>();
    // pagoda's plain output agrees with llama.cpp's on the first 32 tokens (test_quantize).
    CHECK(std::vector<int32_t>(plain.tokens[i].begin(), plain.tokens[i].begin() + 32) ==
          std::vector<int32_t>(want.begin(), want.begin() + 32));
  }
  // 16: each prompt twice, the second copy opting out.
  auto mixed = reqs;
  for (auto r : reqs) {
    r.speculative = false;
    mixed.push_back(r);
  }
  for (SpeculativeMode mode : {SpeculativeMode::Ngram, SpeculativeMode::Draft}) {
    INFO(speculative_mode_name(mode));
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Run alone = run(f, spec_config(mode, 5, 2), {reqs[i]}, mode == SpeculativeMode::Draft ? &f : nullptr);
      CHECK(alone.tokens[0] == plain.tokens[i]);
      check_no_leaks(alone);
    }
    const Run r = run(f, spec_config(mode, 5, 2), mixed, mode == SpeculativeMode::Draft ? &f : nullptr);
    for (size_t i = 0; i < mixed.size(); ++i) CHECK(r.tokens[i] == plain.tokens[i % reqs.size()]);
    CHECK(r.stats.spec_accepted > 0);
    check_no_leaks(r);
  }
}
