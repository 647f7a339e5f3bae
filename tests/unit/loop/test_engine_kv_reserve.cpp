// The KV block a model reserves for itself (the inert rows of steps padded to a backend's row
// buckets, Model::kv_reserved_blocks) comes out of the engine's KV budget: the cache the
// backend is asked for holds exactly the budget's blocks, the engine's block pool one fewer,
// and a budget that the reserve leaves too small is refused. A CPU backend that pads as the
// CUDA backend does with graphs on stands in for it.
#include <catch2/catch.hpp>

#include "engine_test_util.h"
#include "tests/support/forwarding_backend.h"

using namespace pagoda;
using namespace pagoda::test;

namespace {

// The CPU backend, with row buckets of 1, 2, 4, 8 for recorded steps; notes the cache it gets.
class PaddingCpuBackend final : public ForwardingBackend {
 public:
  explicit PaddingCpuBackend(int* cache_blocks)
      : ForwardingBackend(std::make_unique<CpuBackend>(1)), cache_blocks_(cache_blocks) {}
  int64_t recorded_rows(int64_t n) const override {
    if (n < 1 || n > 8) return n;
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  void init_kv_cache(const KvCacheConfig& cfg) override {
    *cache_blocks_ = cfg.num_blocks;
    ForwardingBackend::init_kv_cache(cfg);
  }

 private:
  int* cache_blocks_;
};

// The CPU backend as it is (no buckets), noting the cache it gets.
class PlainCpuBackend final : public ForwardingBackend {
 public:
  explicit PlainCpuBackend(int* cache_blocks)
      : ForwardingBackend(std::make_unique<CpuBackend>(1)), cache_blocks_(cache_blocks) {}
  void init_kv_cache(const KvCacheConfig& cfg) override {
    *cache_blocks_ = cfg.num_blocks;
    ForwardingBackend::init_kv_cache(cfg);
  }

 private:
  int* cache_blocks_;
};

GenerationRequest greedy_request() {
  GenerationRequest r;
  r.prompt = random_tokens(21, 4);
  r.stop.max_tokens = 12;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

}  // namespace

TEST_CASE("engine: the model's reserved KV block is part of the KV budget") {
  int padded_blocks = 0, plain_blocks = 0;
  Model padded(tiny_model(), std::make_unique<PaddingCpuBackend>(&padded_blocks), 512);
  Model plain(tiny_model(), std::make_unique<PlainCpuBackend>(&plain_blocks), 512);
  CHECK(padded.kv_reserved_blocks() == 1);
  CHECK(plain.kv_reserved_blocks() == 0);
  std::vector<int32_t> tokens[2];
  {
    LlmEngine with_reserve(padded, nullptr, tiny_engine_config(10));
    LlmEngine without(plain, nullptr, tiny_engine_config(10));
    CHECK(padded_blocks == 10);  // the whole cache, the reserve included, is the budget
    CHECK(with_reserve.num_kv_blocks() == 9);
    CHECK(plain_blocks == 10);
    CHECK(without.num_kv_blocks() == 10);
    // Generation runs as before on the engine that keeps a block back.
    int i = 0;
    for (LlmEngine* e : {&with_reserve, &without}) {
      const auto stream = submit_or_throw(*e, greedy_request());
      tokens[i++] = collect(*stream).choices[0].tokens;
      wait_idle(*e);
    }
  }
  CHECK(tokens[0].size() == 12);
  CHECK(tokens[0] == tokens[1]);
  // Two blocks are the least an engine runs with: the reserve makes a budget of two too small.
  CHECK_NOTHROW(LlmEngine(plain, nullptr, tiny_engine_config(2)));
  CHECK_THROWS_AS(LlmEngine(padded, nullptr, tiny_engine_config(2)), EngineError);
}
