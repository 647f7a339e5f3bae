// KV cache element types through the engine: at a fixed --kv-cache-memory, a q8_0 cache holds
// 64/34 = 1.88x the blocks of an f16 one (head_dim 64: groups of 32 values + an f16 scale; 1.6x
// for heads of 8, groups of 8) and an f32 one half, and the scheduler admits that many more
// sequences in one step. Greedy output with q8_0 stays close to f16 on the tiny random model
// (the fidelity on a trained model is tests/e2e's stories260K test).
#include <catch2/catch.hpp>

#include "engine/core/scheduler.h"
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
int admitted(size_t bytes, GgmlType kv_type, int* blocks, const gguf::GgufFile& file = head64_model()) {
  auto model = load_model(file, 64);
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.kv_type = kv_type;
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
