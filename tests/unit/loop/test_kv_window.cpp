// Releasing KV blocks behind a sliding window (KvCacheManager::release_behind_window, used when
// every layer of the model is windowed: phi3 files that set a window). Exact block accounting
// on the manager alone (a growing sequence holds at most ceil(W/B) + 1 blocks; shared,
// registered and pinned blocks stay for their other owners; context shift and fork over holes),
// then the engine on a windowed phi3 model: the same tokens and logprobs, bit for bit, with and
// without releasing, over generations many windows long (context shift, prefix sharing,
// speculative trees), f16 and q8_0 KV, and the peak blocks in use.
#include <catch2/catch.hpp>

#include <algorithm>

#include "engine/kv/kv_cache_manager.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

constexpr int kHole = KvCacheManager::kHole;

// Grows `seq` token by token from `from` to `to` tokens in the cache, releasing behind the
// window after each step as the scheduler does; returns the most blocks it held at once.
int grow(KvCacheManager& kv, uint64_t seq, int from, int to, int keep_tokens = 0) {
  int peak = 0;
  for (int n = from; n < to; ++n) {
    REQUIRE(kv.allocate(seq, n, 1));
    peak = std::max(peak, kv.blocks_held(seq));
    kv.release_behind_window(seq, n + 1, keep_tokens);
  }
  return peak;
}

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

}  // namespace

TEST_CASE("window release: a growing sequence holds at most ceil(W/B) + 1 blocks, exactly those it reads") {
  const int B = 16;
  for (int W : {1, 16, 17, 40, 64}) {
    INFO("window " << W);
    KvCacheManager kv(64, B);
    kv.set_window(W);
    int peak = 0;
    for (int n = 0; n < 1000; ++n) {  // write token n, then n + 1 tokens are in the cache
      REQUIRE(kv.allocate(1, n, 1));
      peak = std::max(peak, kv.blocks_held(1));
      const int released = kv.release_behind_window(1, n + 1, 0);
      const auto& table = kv.block_table(1);
      REQUIRE(static_cast<int>(table.size()) == n / B + 1);
      // The next query (position n + 1) reads n + 2 - W .. n: those blocks are held, no others.
      const int first_read = std::max(0, n + 2 - W);
      for (int bi = 0; bi <= n / B; ++bi)
        REQUIRE((table[static_cast<size_t>(bi)] == kHole) == ((bi + 1) * B <= first_read));
      REQUIRE(kv.pool().stats().used == kv.blocks_held(1));
      REQUIRE(released <= 1);
    }
    CHECK(peak <= (W + B - 1) / B + 1);
    CHECK(kv.pool().peak_used() == peak);
    kv.free(1);
    CHECK(kv.pool().stats().used == 0);
  }
  // Window off: nothing is released.
  KvCacheManager kv(64, B);
  CHECK(grow(kv, 1, 0, 300) == 19);
  CHECK(kv.blocks_held(1) == 19);
}

TEST_CASE("window release: shared and registered blocks stay for their other owners and the prefix cache") {
  const int B = 16, W = 20;
  KvCacheManager kv(64, B);
  kv.set_window(W);
  const auto prompt = iota_tokens(64);
  // Sequence 1 computes a 64-token prompt (4 registered blocks) in one step.
  REQUIRE(kv.match_prefix(1, prompt, 64) == 0);
  REQUIRE(kv.allocate(1, 0, 64));
  kv.commit(1, prompt, 64);
  // Sequence 2 shares it and generates past it.
  REQUIRE(kv.match_prefix(2, prompt, 63) == 48);
  const std::vector<int32_t> shared(kv.block_table(2).begin(), kv.block_table(2).end());
  grow(kv, 2, 48, 200);
  for (int b : shared) CHECK(kv.pool().ref_count(b) == 1);  // sequence 1's reference only
  // Sequence 1 releases behind its window too: its registered blocks go to the prefix cache.
  kv.release_behind_window(1, 64, 0);
  CHECK(kv.blocks_held(1) == 2);  // positions 45..63 are read next: blocks 2 and 3
  CHECK(kv.pool().stats().cached == 2);
  // A new prompt with the same 64 tokens still finds all four blocks.
  CHECK(kv.match_prefix(3, prompt, 64) == 64);
  kv.free(1);
  kv.free(2);
  kv.free(3);
  CHECK(kv.pool().stats().used == 0);
  CHECK(kv.pool().stats().cached == 4);  // the prompt's blocks (sequence 2 registered none)
}

TEST_CASE("window release: the pinned prefix and the kept tokens stay; context shift and fork over holes") {
  const int B = 16, W = 24;
  KvCacheManager kv(128, B);
  kv.set_window(W);
  // The pinned system prompt never releases.
  const auto sys = iota_tokens(40, 1000);
  REQUIRE(kv.match_prefix(9, sys, 40) == 0);
  REQUIRE(kv.allocate(9, 0, 40));
  kv.commit(9, sys, 40);
  kv.pin(9, sys);
  CHECK(kv.release_behind_window(9, 400, 0) == 0);
  CHECK(kv.blocks_held(9) == 3);

  // A sequence keeping its first 20 tokens (2 blocks) on a context shift.
  grow(kv, 1, 0, 200, 20);
  const auto& t = kv.block_table(1);
  CHECK(t[0] != kHole);
  CHECK(t[1] != kHole);
  CHECK(t[2] == kHole);
  const int held = kv.blocks_held(1);
  CHECK(held == 2 + 2);  // the kept blocks and blocks 11, 12 (positions 177..199)

  // Its fork shares every held block and the holes.
  kv.fork(1, 2, 200);
  CHECK(kv.block_table(2) == kv.block_table(1));
  for (int32_t b : kv.block_table(1))
    if (b != kHole) CHECK(kv.pool().ref_count(b) == 2);

  // Context shift: keep 32 tokens, drop 80; the held later blocks are copied (shared with the
  // fork) and re-roped, the holes stay holes (behind the window after the shift too).
  std::vector<BlockCopy> copies;
  std::vector<KShift> shifts;
  kv.take_edits(copies, shifts);
  REQUIRE(kv.shift(1, 200, 32, 80));
  kv.take_edits(copies, shifts);
  CHECK(copies.size() == 2);
  CHECK(shifts.size() == 2);
  const auto& after = kv.block_table(1);
  REQUIRE(after.size() == 13 - 5);
  CHECK(after[0] != kHole);
  CHECK(after[1] != kHole);
  for (size_t bi = 2; bi < 6; ++bi) CHECK(after[bi] == kHole);
  CHECK(after[6] != kHole);
  CHECK(after[7] != kHole);
  // It goes on from 120 tokens, releasing again as it grows.
  grow(kv, 1, 120, 300, 20);
  CHECK(kv.blocks_held(1) <= 2 + (W + B - 1) / B + 1);
  kv.free(1);
  kv.free(2);
  CHECK(kv.pool().stats().used == 3);  // the pinned prefix
}

namespace {

// A phi3 model of tiny_model's shape whose every layer has a window of 24.
const gguf::GgufFile& windowed_phi3() {
  static const gguf::GgufFile f = tiny_windowed_model_file(24, 11, Arch::Phi3, 4096);
  return f;
}

struct WindowRun {
  std::vector<ChoiceResult> choices;
  int peak_blocks = 0;
  EngineStats stats;
};

WindowRun run_windowed(EngineConfig cfg, const std::vector<GenerationRequest>& reqs) {
  auto model = load_model(windowed_phi3(), cfg.max_batch_tokens);
  LlmEngine engine(*model, nullptr, cfg);
  const auto streams = submit_all(engine, reqs);
  WindowRun out;
  for (size_t i = 0; i < streams.size(); ++i)
    for (const auto& c : collect(*streams[i], reqs[i].n).choices) out.choices.push_back(c);
  out.stats = wait_idle(engine);
  engine.run_on_engine_thread([&](Model&, KvCacheManager& kv) { out.peak_blocks = kv.pool().peak_used(); });
  return out;
}

GenerationRequest windowed_request(std::vector<int32_t> prompt, int max_tokens, bool sampled, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  r.sampling.logprobs = 2;
  r.sampling.temperature = sampled ? 0.8f : 0.0f;
  r.sampling.seed = seed;
  return r;
}

}  // namespace

TEST_CASE("window release on a windowed phi3: the same tokens and logprobs as without, in a bounded cache") {
  const GgmlType kv = GENERATE(GgmlType::F16, GgmlType::Q8_0);
  INFO("kv " << ggml_type_info(kv).name);
  // One sequence, 400 tokens (16 windows of 24): at most ceil(24/16) + 1 = 3 blocks at a time.
  {
    const std::vector<GenerationRequest> one{windowed_request(random_tokens(10, 1), 400, false, 0)};
    EngineConfig on = tiny_engine_config(256, 512, 16, kv), off = on;
    off.release_behind_window = false;
    const WindowRun a = run_windowed(on, one), b = run_windowed(off, one);
    REQUIRE(a.choices[0].tokens.size() == 400);
    CHECK(a.choices[0] == b.choices[0]);
    CHECK(a.peak_blocks == 3);
    CHECK(b.peak_blocks == (410 + 15) / 16);
    WARN("window 24, block 16, 10 + 400 tokens: peak blocks " << a.peak_blocks << " releasing, " << b.peak_blocks
                                                              << " not");
    CHECK(a.stats.kv_blocks_used == 0);
  }
  // Eight sequences: four share a 40-token prompt prefix, half sampled, a 128-token context
  // (context shifts keeping 20 tokens), a 7-token prefill budget (chunked prompts); and n = 3.
  {
    const auto common = random_tokens(40, 77);
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 8; ++i) {
      auto prompt = random_tokens(5 + 9 * i, 200 + i);
      if (i < 4) prompt.insert(prompt.begin(), common.begin(), common.end());
      reqs.push_back(windowed_request(prompt, 150 + 20 * i, i % 2 == 1, 300 + i));
      reqs.back().n_keep = 20;
    }
    // Three sampled choices forked after a 50-token prompt: they inherit its holes.
    reqs.push_back(windowed_request(random_tokens(50, 9), 90, true, 41));
    reqs.back().n = 3;
    EngineConfig on = tiny_engine_config(256, 7, 16, kv), off = on;
    on.ctx_size = off.ctx_size = 128;
    off.release_behind_window = false;
    const WindowRun a = run_windowed(on, reqs), b = run_windowed(off, reqs);
    REQUIRE(a.choices.size() == b.choices.size());
    for (size_t i = 0; i < a.choices.size(); ++i) CHECK(a.choices[i] == b.choices[i]);
    CHECK(a.stats.context_shifts > 0);
    CHECK(a.stats.context_shifts == b.stats.context_shifts);
    CHECK(a.stats.prompt_tokens_cached == b.stats.prompt_tokens_cached);
    CHECK(a.stats.prompt_tokens_cached > 0);
    CHECK(a.peak_blocks < b.peak_blocks);
    WARN("8 sequences and an n = 3 request, context 128: peak blocks " << a.peak_blocks << " releasing, " << b.peak_blocks << " not");
    CHECK(a.stats.kv_blocks_used == 0);
  }
}

TEST_CASE("window release under speculative trees (n-gram drafts) on a windowed phi3: plain decoding's tokens") {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    // A repeated phrase: n-gram drafts find matches, so trees are verified across the window.
    auto phrase = random_tokens(6, 40 + i), prompt = phrase;
    for (int k = 0; k < 4; ++k) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    reqs.push_back(windowed_request(prompt, 120, false, 0));
  }
  EngineConfig plain = tiny_engine_config(256);
  plain.release_behind_window = false;
  const WindowRun want = run_windowed(plain, reqs);
  for (int tree : {1, 3}) {
    INFO("spec_tree " << tree);
    EngineConfig spec = tiny_engine_config(256);
    spec.speculative = SpeculativeMode::Ngram;
    spec.spec_tokens = 6;
    spec.spec_tree = tree;
    const WindowRun got = run_windowed(spec, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(got.choices[i].tokens == want.choices[i].tokens);
    CHECK(got.stats.spec_drafted > 0);
    CHECK(got.stats.kv_blocks_used == 0);
    CHECK(got.peak_blocks < want.peak_blocks);
  }
}
