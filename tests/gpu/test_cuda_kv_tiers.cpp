// The persistent prefix cache's device side on the CudaBackend (README, "Persistent prefix
// cache"): raw KV blocks read and written back bit for bit, with the CPU backend's bytes for
// the same F16 contents (so a file saved on one loads on the other); and the host-memory tier
// on a CUDA engine: a prompt whose blocks were evicted comes back by copy (hit counts) with the
// tokens of its first run. Skips (CTest: Skipped) without a CUDA device.
#include <catch2/catch.hpp>

#include <memory>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/loop/engine.h"
#include "engine/model/model.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;

namespace {

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + salt * 97 + 5) % 256);
  return p;
}

std::vector<int32_t> greedy_tokens(LlmEngine& engine, const std::vector<int32_t>& prompt, int* cached) {
  GenerationRequest r;
  r.prompt = prompt;
  r.stop.max_tokens = 8;
  r.stop.ignore_eos = true;
  r.sampling.temperature = 0;
  SubmitError err;
  auto s = engine.submit(r, &err);
  REQUIRE(s);
  std::vector<int32_t> out;
  while (!s->done())
    if (auto d = s->next(std::chrono::milliseconds(100))) out.insert(out.end(), d->tokens.begin(), d->tokens.end());
  *cached = s->usage().cached_prompt_tokens;
  return out;
}

}  // namespace

TEST_CASE("cuda: raw KV blocks round-trip bit for bit and match the CPU backend's bytes", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // One type for K and V, and K and V apart (their parts of a raw block then differ in size).
  const KvTypes types = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::F16, GgmlType::Q8_0),
                                 KvTypes(GgmlType::Q8_0, GgmlType::F32));
  INFO(kv_types_name(types));
  const KvCacheConfig cfg{2, 4, 16, 2, 16, types};
  auto gpu = make_cuda_backend();
  CpuBackend cpu(1);
  gpu->init_kv_cache(cfg);
  cpu.init_kv_cache(cfg);
  const size_t elems = 16 * 2 * 16;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const auto k = gputest::bf16_values(elems, 10 + l), v = gputest::bf16_values(elems, 20 + l);
    gpu->write_kv_block(l, 1, k.data(), v.data());
    cpu.write_kv_block(l, 1, k.data(), v.data());
  }
  REQUIRE(gpu->kv_block_raw_bytes() == cpu.kv_block_raw_bytes());
  std::vector<uint8_t> g(gpu->kv_block_raw_bytes()), c(cpu.kv_block_raw_bytes());
  gpu->read_kv_block_raw(1, g.data());
  cpu.read_kv_block_raw(1, c.data());
  CHECK(g == c);
  gpu->write_kv_block_raw(3, c.data());  // the CPU's bytes into another GPU block
  std::vector<float> k1(elems), v1(elems), k3(elems), v3(elems);
  for (int l = 0; l < cfg.n_layers; ++l) {
    gpu->read_kv_block(l, 1, k1.data(), v1.data());
    gpu->read_kv_block(l, 3, k3.data(), v3.data());
    CHECK(k1 == k3);
    CHECK(v1 == v3);
  }
}

TEST_CASE("cuda engine: the host tier brings evicted prefix blocks back by copy", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // An explicit size, and the automatic one (the server's default: on CUDA half the device KV
  // cache, here 6 blocks' bytes, enough for the first prompt's 3 full blocks).
  const bool automatic = GENERATE(false, true);
  INFO((automatic ? "auto" : "4 MiB"));
  Model model(gputest::tiny_bf16_model(), make_cuda_backend(), 64);
  EngineConfig cfg;
  cfg.block_size = 16;
  cfg.max_batch_tokens = 64;
  // 12 blocks in the engine's pool (the second prompt takes all), plus the block the model
  // keeps for padded steps' inert rows, which the budget covers too.
  cfg.kv_cache_memory = static_cast<size_t>(12 + model.kv_reserved_blocks()) * model.kv_block_bytes(16);
  if (automatic) cfg.kv_host_memory_auto = true;
  else cfg.kv_host_memory = 4u << 20;
  LlmEngine engine(model, nullptr, cfg);
  int cached = -1;
  const auto a = tokens(64, 1);
  const auto first = greedy_tokens(engine, a, &cached);
  greedy_tokens(engine, tokens(180, 2), &cached);
  const auto again = greedy_tokens(engine, a, &cached);
  CHECK(again == first);
  CHECK(cached == 48);
  const EngineStats st = engine.stats();
  CHECK(st.kv_host_restored == 3);
  CHECK(st.kv_host_spilled >= 3);
}
