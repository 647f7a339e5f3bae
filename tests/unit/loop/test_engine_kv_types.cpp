// KV cache element types through the engine: at a fixed --kv-cache-memory, a q8_0 cache holds
// 64/34 = 1.88x the blocks of an f16 one (head_dim 64: groups of 32 values + an f16 scale; 1.6x
// for heads of 8, groups of 8) and an f32 one half, and the scheduler admits that many more
// sequences in one step. Greedy output with q8_0 stays close to f16 on the tiny random model
// (the fidelity on a trained model is tests/e2e's stories260K test).
// Mixed K/V types (--kv-cache-type-k / -v): a block costs K's row bytes plus V's, and the
// admitted sequences follow that sum; a K-shift re-ropes K in K's type and leaves V's bytes
// alone (checked against recomputing the kept tokens); a prefix hit and preemption give each
// request's output alone, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "engine/scheduler/scheduler.h"
#include "engine/model/model_config.h"
#include "engine_test_util.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

gguf::GgufFile dim64_model(int n_heads, int n_kv_heads) {
  ModelSpec spec;
  spec.n_layers = 2;
  spec.dim = 64;
  spec.ff_dim = 128;
  spec.n_heads = n_heads;
  spec.n_kv_heads = n_kv_heads;
  spec.ctx = 1024;
  spec.type = GgmlType::F32;
  return gguf::GgufFile::from_bytes(build_model(spec, {}, 1).to_bytes(), "dim64.gguf");
}

// One attention head of 64 (dim 64): q8_0 groups of 32, the layout GGUF's Q8_0 blocks have.
const gguf::GgufFile& head64_model() {
  static const gguf::GgufFile f = dim64_model(1, 1);
  return f;
}

// stories260K's attention shape (8 query heads, 4 KV heads of 8): q8_0 groups of 8, 10 bytes
// per head row against f16's 16.
const gguf::GgufFile& head8_model() {
  static const gguf::GgufFile f = dim64_model(8, 4);
  return f;
}

// Sequences of 32 prompt tokens (two blocks each) the scheduler admits in its first step on the
// cache an engine sizes from `bytes` of `kv_type`.
int admitted(size_t bytes, KvTypes kv_type, int* blocks, const gguf::GgufFile& file = head64_model()) {
  auto model = load_model(file, 64);
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.kv_types = kv_type;
  cfg.kv_cache_memory = bytes;
  cfg.max_seqs = 1024;
  LlmEngine engine(*model, nullptr, cfg);
  *blocks = engine.num_kv_blocks();
  KvCacheManager kv(*blocks, 16);
  SchedulerConfig sc;
  sc.max_batch_tokens = 1 << 16;
  sc.max_seqs = 1024;
  sc.ctx_limit = 1024;
  Scheduler s(sc, kv);
  for (int i = 0; i < 512; ++i) {
    auto req = std::make_shared<GenerationRequest>();
    req->prompt = random_tokens(32, 100 + i);
    req->stop.max_tokens = 1;
    auto seq = std::make_shared<Sequence>();
    seq->id = static_cast<uint64_t>(i + 1);
    seq->request = req;
    seq->tokens = req->prompt;
    s.add(seq);
  }
  return static_cast<int>(s.schedule().seqs.size());
}

}  // namespace

TEST_CASE("a q8_0 KV cache admits 1.88x the sequences of f16 in the same memory; f32 half") {
  const size_t f16_block = load_model(head64_model(), 8)->kv_block_bytes(16, GgmlType::F16);
  CHECK(f16_block == 2 * 2 * 16 * 64 * 2);  // K and V, 2 layers, 16 tokens, 64 values, 2 bytes
  CHECK(load_model(head64_model(), 8)->kv_block_bytes(16, GgmlType::Q8_0) == 2 * 2 * 16 * 2 * 34);
  const size_t bytes = 128 * f16_block;
  int b16 = 0, b8 = 0, b32 = 0;
  const int n16 = admitted(bytes, GgmlType::F16, &b16);
  const int n8 = admitted(bytes, GgmlType::Q8_0, &b8);
  const int n32 = admitted(bytes, GgmlType::F32, &b32);
  INFO("blocks f16 " << b16 << ", q8_0 " << b8 << ", f32 " << b32 << "; admitted " << n16 << ", " << n8 << ", " << n32);
  CHECK(b16 == 128);
  CHECK(b8 == 128 * 64 / 34);  // 240
  CHECK(b32 == 64);
  CHECK(n16 == 64);
  CHECK(n8 == 120);
  CHECK(n32 == 32);
}

TEST_CASE("heads of 8 (stories260K's shape): a q8_0 KV cache admits 1.6x the sequences of f16") {
  const size_t f16_block = load_model(head8_model(), 8)->kv_block_bytes(16, GgmlType::F16);
  CHECK(f16_block == 2 * 2 * 16 * 4 * 8 * 2);  // K and V, 2 layers, 16 tokens, 4 KV heads of 8, 2 bytes
  CHECK(load_model(head8_model(), 8)->kv_block_bytes(16, GgmlType::Q8_0) == 2 * 2 * 16 * 4 * 10);
  int b16 = 0, b8 = 0;
  const int n16 = admitted(128 * f16_block, GgmlType::F16, &b16, head8_model());
  const int n8 = admitted(128 * f16_block, GgmlType::Q8_0, &b8, head8_model());
  CHECK(b16 == 128);
  CHECK(b8 == 128 * 16 / 10);  // 204
  CHECK(n16 == 64);
  CHECK(n8 == 102);
}

TEST_CASE("an engine with a q8_0 cache generates what the f16 one does on most tokens") {
  // Greedy, so a run is a pure function of the logits; a flip at a near-tie changes everything
  // after it, hence a common-prefix bound (measured: 96 of 96). The bar on a trained model is
  // tests/e2e/test_stories_fidelity.cpp's.
  int same = 0, total = 0;
  for (int p = 0; p < 4; ++p) {
    GenerationRequest r;
    r.prompt = random_tokens(20 + 7 * p, 300 + p);
    r.stop.max_tokens = 24;
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0;  // greedy
    std::vector<int32_t> out[2];
    for (int k = 0; k < 2; ++k) {
      auto model = load_model(tiny_model(), 64);
      LlmEngine engine(*model, nullptr, tiny_engine_config(32, 64, 4, k == 0 ? GgmlType::F16 : GgmlType::Q8_0));
      out[k] = collect(*submit_or_throw(engine, r)).choices[0].tokens;
    }
    REQUIRE(out[0].size() == 24);
    REQUIRE(out[1].size() == 24);
    // Greedy runs agree up to the first divergence; count the common prefix.
    int prefix = 0;
    while (prefix < 24 && out[0][size_t(prefix)] == out[1][size_t(prefix)]) ++prefix;
    same += prefix;
    total += 24;
  }
  INFO("common greedy prefix " << same << " of " << total << " tokens");
  CHECK(same >= total / 2);
}

TEST_CASE("mixed K/V types: a block costs K's row bytes plus V's; admissions follow the sum") {
  // head64_model: 2 layers, one KV head of 64. Per token and layer: f16 128 bytes, q8_0 68
  // (two groups of 32 + their f16 scales), f32 256.
  const size_t f16_block = load_model(head64_model(), 8)->kv_block_bytes(16, GgmlType::F16);
  const size_t bytes = 128 * f16_block;
  struct Case {
    KvTypes types;
    size_t k_row, v_row;
  };
  for (const Case& c : {Case{{GgmlType::F16, GgmlType::Q8_0}, 128, 68}, Case{{GgmlType::Q8_0, GgmlType::F16}, 68, 128},
                        Case{{GgmlType::Q8_0, GgmlType::F32}, 68, 256}, Case{{GgmlType::F32, GgmlType::F16}, 256, 128}}) {
    INFO(kv_types_name(c.types));
    const size_t block = 2 * 16 * (c.k_row + c.v_row);  // 2 layers, 16 tokens
    CHECK(load_model(head64_model(), 8)->kv_block_bytes(16, c.types) == block);
    int blocks = 0;
    const int n = admitted(bytes, c.types, &blocks);
    CHECK(static_cast<size_t>(blocks) == bytes / block);  // f16 + q8_0: 167 of f16's 128
    CHECK(n == blocks / 2);                               // two blocks per sequence
  }
  // stories260K's shape (heads of 8): f16 K + q8_0 V rows cost 16 + 10 bytes against 32.
  const size_t f16_h8 = load_model(head8_model(), 8)->kv_block_bytes(16, GgmlType::F16);
  const KvTypes k16_v8{GgmlType::F16, GgmlType::Q8_0};
  CHECK(load_model(head8_model(), 8)->kv_block_bytes(16, k16_v8) == 2 * 16 * 4 * (16 + 10));
  int blocks = 0;
  CHECK(admitted(128 * f16_h8, k16_v8, &blocks, head8_model()) == 128 * 32 / 26 / 2);  // 78
  CHECK(blocks == 128 * 32 / 26);                                                        // 157
}

TEST_CASE("mixed K/V types: a K-shift equals recomputing the kept tokens at their new positions") {
  // Layer 0's K and V depend only on a token and its position. Prefill 64 tokens, then re-rope
  // the K of the last two blocks by -32 (what a context shift that drops the first 32 does):
  // layer 0 must then hold what a fresh prefill of those 32 tokens at positions 0..31 stores.
  // K within its type's rounding (a shift rounds once more), V bit for bit (a shift never
  // touches it, whatever its type).
  const KvTypes kv = GENERATE(KvTypes(GgmlType::F16, GgmlType::Q8_0), KvTypes(GgmlType::Q8_0, GgmlType::F16),
                              KvTypes(GgmlType::F32, GgmlType::Q8_0));
  INFO(kv_types_name(kv));
  const int B = 16;
  const auto tokens = random_tokens(64, 77);
  const std::vector<int32_t> kept(tokens.begin() + 32, tokens.end());
  std::vector<float> logits;
  auto shifted = load_model(tiny_model(), 64), fresh = load_model(tiny_model(), 64);
  shifted->init_kv_cache(8, B, kv);
  fresh->init_kv_cache(8, B, kv);
  shifted->forward(whole_prompt_plan(tokens, B, true), logits);
  StepPlan shift;
  shift.k_shifts = {{2, -32}, {3, -32}};
  shifted->forward(shift, logits);  // cache edits only
  fresh->forward(whole_prompt_plan(kept, B, true), logits);

  const ModelConfig& c = shifted->config();
  const size_t n = static_cast<size_t>(B) * c.n_kv_heads * c.head_dim;
  const double tol = kv.k == GgmlType::F32 ? 2e-5 : kv.k == GgmlType::F16 ? 4e-3 : 2e-2;
  double max_err = 0;
  for (int i = 0; i < 2; ++i) {
    std::vector<float> ks(n), vs(n), kf(n), vf(n);
    shifted->backend().read_kv_block(0, 2 + i, ks.data(), vs.data());
    fresh->backend().read_kv_block(0, i, kf.data(), vf.data());
    CHECK(vs == vf);
    for (size_t h = 0; h < n; h += static_cast<size_t>(c.head_dim)) {
      // Q8_0's error scales with its group's largest value, not with each value's own.
      double head_max = 0;
      for (int d = 0; d < c.head_dim; ++d) head_max = std::max(head_max, std::abs(double(kf[h + d])));
      for (int d = 0; d < c.head_dim; ++d) {
        const double err = std::abs(double(ks[h + d]) - kf[h + d]);
        max_err = std::max(max_err, err / (1.0 + (kv.k == GgmlType::Q8_0 ? head_max : std::abs(double(kf[h + d])))));
      }
    }
  }
  INFO("max relative K error " << max_err);
  CHECK(max_err <= tol);
}

TEST_CASE("mixed K/V types: a prefix hit and preemption give each request's output alone") {
  const KvTypes kv = GENERATE(KvTypes(GgmlType::F16, GgmlType::Q8_0), KvTypes(GgmlType::Q8_0, GgmlType::F32));
  INFO(kv_types_name(kv));
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r;
    r.prompt = random_tokens(20 + (i * 23) % 60, 500 + i);
    r.stop.max_tokens = 10;
    r.stop.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.logprobs = 1;
    reqs.push_back(r);
  }
  // Runs `batch` on a fresh engine of `cfg` after `warmup` (one at a time); returns the batch's
  // results and the engine's stats.
  const auto run = [](const EngineConfig& cfg, const std::vector<GenerationRequest>& batch,
                      const std::vector<GenerationRequest>& warmup, EngineStats* st) {
    auto model = load_model(tiny_model(), cfg.max_batch_tokens);
    LlmEngine engine(*model, nullptr, cfg);
    for (const auto& w : warmup) collect(*submit_or_throw(engine, w));
    std::vector<RequestResult> out;
    const auto streams = submit_all(engine, batch);
    for (size_t i = 0; i < streams.size(); ++i) out.push_back(collect(*streams[i], batch[i].n));
    *st = wait_idle(engine);
    return out;
  };
  EngineStats st;
  std::vector<ChoiceResult> alone;
  for (const auto& r : reqs) alone.push_back(run(tiny_engine_config(64, 512, 16, kv), {r}, {}, &st)[0].choices[0]);

  // A warm-up sharing reqs[1]'s first 40 tokens leaves two full blocks cached for it.
  REQUIRE(reqs[1].prompt.size() >= 40);
  GenerationRequest warm = reqs[0];
  warm.prompt = random_tokens(60, 99);
  std::copy(reqs[1].prompt.begin(), reqs[1].prompt.begin() + 40, warm.prompt.begin());
  const auto hit = run(tiny_engine_config(64, 512, 16, kv), {reqs[1]}, {warm}, &st);
  CHECK(hit[0].usage.cached_prompt_tokens == 32);
  CHECK(hit[0].choices[0] == alone[1]);

  // 8 sequences of up to 6 blocks on 10, and a request whose 4 choices outgrow the cache
  // together whatever the timing (the 8 may not overlap: the engine runs while they arrive).
  EngineConfig small = tiny_engine_config(10, 512, 16, kv);
  small.max_step_ms = -1;  // whole chunks beside decodes (timed chunks may not preempt)
  const GenerationRequest pressure = preempting_request(10, 4242);
  std::vector<ChoiceResult> pressure_alone;
  for (int c = 0; c < pressure.n; ++c)
    pressure_alone.push_back(run(tiny_engine_config(64, 512, 16, kv), {choice_alone(pressure, c)}, {}, &st)[0].choices[0]);
  std::vector<GenerationRequest> batch = {pressure};
  batch.insert(batch.end(), reqs.begin(), reqs.end());
  const auto together = run(small, batch, {}, &st);
  CHECK(st.preemptions > 0);
  CHECK(st.kv_blocks_used == 0);
  for (int c = 0; c < pressure.n; ++c) CHECK(together[0].choices[size_t(c)] == pressure_alone[size_t(c)]);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(together[i + 1].choices[0] == alone[i]);
}
