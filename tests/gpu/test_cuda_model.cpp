// The full Model on the CudaBackend against the same model on the CpuBackend: random-weight
// models from make-model (llama and qwen2 shapes; f16 and q8_0 weights), a chunked prefill over a
// scattered block table, then 64 greedy decode steps. Both models are fed the CPU's greedy
// token each step (so one near-tie cannot derail the rest) and must agree on the argmax at every
// step whose CPU top-2 margin is not a near-tie (margin under 2% of the top logit + 1: about
// twice the largest logit difference seen), with logits within a relative L2 error of 3% for f16
// weights and 6% for q8_0 (the GPU rounds activations to bf16 before each GEMM and dequantizes
// weights to bf16; the CPU's quantized GEMM quantizes activations to 8 bits). These bounds were
// set from a CPU emulation of the GPU's roundings (bf16 weights, bf16 GEMM inputs), which gave
// 1.2% (f16) and 2.8% (q8_0) with 5-16 near-ties in 64 steps (docs/cuda.md).
// PAGODA_GPU_HEAVY=1 adds the TinyLlama-1.1B shape (f16 and q8_0). The qwen3/gemma/phi3 case
// checks the new ops (Q/K norms, windows, soft-caps, GeGLU, fused weights) the same way; phi3's
// decode steps run with holes where blocks behind its window were released; the top-k MoE case
// allows router near-tie steps (see compare_models).
// Skips (CTest: Skipped) without a CUDA device.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_writer.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

constexpr int kBlock = 16;

// Plan for tokens [begin, end) of one sequence whose block table is `table`.
StepPlan chunk_plan(const std::vector<int32_t>& ids, int begin, int end,
                    const std::vector<int32_t>& table) {
  StepPlan p;
  SeqInStep s;
  s.first_token = 0;
  s.n_tokens = end - begin;
  s.n_past = begin;
  s.block_table_offset = 0;
  s.n_blocks = static_cast<int32_t>(table.size());
  p.seqs.push_back(s);
  p.block_tables = table;
  for (int i = begin; i < end; ++i) {
    p.tokens.push_back(ids[static_cast<size_t>(i)]);
    p.positions.push_back(i);
    p.slots.push_back(table[static_cast<size_t>(i / kBlock)] * kBlock + i % kBlock);
    p.token_seq.push_back(0);
  }
  p.logit_rows.push_back(end - begin - 1);
  return p;
}

void compare_models(const ModelSpec& spec, int prompt_len, int steps) {
  const auto file = gguf::GgufFile::from_bytes(build_model(spec).to_bytes(), spec.name);
  const int max_tokens = 64;
  Model cpu(file, std::make_unique<CpuBackend>(2), max_tokens);
  Model gpu(file, make_cuda_backend(), max_tokens);
  const int vocab = cpu.config().vocab_size;
  const int n_blocks = (prompt_len + steps + kBlock - 1) / kBlock;
  std::vector<int32_t> table;  // scattered: every other block, in reverse
  for (int i = 0; i < n_blocks; ++i) table.push_back(2 * (n_blocks - 1 - i) + 1);
  for (Model* m : {&cpu, &gpu}) m->init_kv_cache(2 * n_blocks + 2, kBlock);

  std::vector<int32_t> ids;
  for (int i = 0; i < prompt_len; ++i) ids.push_back((i * 37 + 11) % vocab);
  std::vector<float> lc, lg;
  // Prefill in chunks of 16 with a ragged tail: tile and chunk boundaries inside the prompt.
  for (int begin = 0; begin < prompt_len; begin += 16) {
    const int end = std::min(prompt_len, begin + 16);
    const StepPlan plan = chunk_plan(ids, begin, end, table);
    cpu.forward(plan, lc);
    gpu.forward(plan, lg);
  }
  INFO(spec.name << " " << ggml_type_info(spec.type).name << " prompt " << prompt_len);
  const double tol = spec.type == GgmlType::F16 ? 0.03 : 0.06;
  const double prefill_err = rel_l2(lg, lc);
  INFO("prefill logits relative L2 error " << prefill_err);
  CHECK(prefill_err < tol);

  const auto& lw = cpu.config().layer_window;
  const int window = std::all_of(lw.begin(), lw.end(), [](int w) { return w > 0; }) && !lw.empty()
                         ? *std::max_element(lw.begin(), lw.end())
                         : 0;
  // Top-k MoE: a step whose router top-k is a near-tie may take another expert on the GPU (a
  // discrete jump, 0.1-0.25 seen under the emulation); a quarter of the steps may exceed the
  // bound there (test_cuda_archs.cpp checks a tiny llama MoE with every expert used strictly).
  const bool routed = spec.n_experts > 0 || spec.arch == Arch::Qwen2Moe;
  int disagreements = 0, near_ties = 0, over = 0;
  double worst = prefill_err;
  for (int step = 0; step < steps; ++step) {
    const int next = argmax(lc);
    if (near_tie(lc))
      ++near_ties;
    else if (argmax(lg) != next)
      ++disagreements;
    ids.push_back(next);
    const int pos = static_cast<int>(ids.size()) - 1;
    // Every layer windowed (phi3): the blocks wholly behind this query's window become holes,
    // as the engine releases them (KvCacheManager::release_behind_window); nothing reads them.
    if (window > 0)
      for (int bi = 0; (bi + 1) * kBlock <= pos - window + 1; ++bi) table[static_cast<size_t>(bi)] = -1;
    const StepPlan plan = chunk_plan(ids, pos, pos + 1, table);
    cpu.forward(plan, lc);
    gpu.forward(plan, lg);
    const double err = rel_l2(lg, lc);
    worst = std::max(worst, err);
    if (err >= tol) ++over;
  }
  INFO("worst logits relative L2 error " << worst << ", near-ties " << near_ties << " of "
                                         << steps);
  INFO(over << " steps over the bound");
  CHECK(over <= (routed ? steps / 4 : 0));
  CHECK(disagreements == 0);
  CHECK(near_ties * 2 <= steps);  // otherwise the model is too flat for the check to mean much
}

}  // namespace

TEST_CASE("cuda: small llama and qwen2 models match the CPU for 64 greedy steps", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    ModelSpec s;  // 2 layers, dim 256, 4 heads, 2 KV heads (head_dim 64)
    s.type = type;
    s.seed = 7;
    compare_models(s, 37, 64);
    ModelSpec q;
    q.arch = Arch::Qwen2;
    q.n_heads = 8;
    q.n_kv_heads = 2;  // head_dim 32, GQA 4, NeoX RoPE, QKV biases
    q.type = type;
    q.seed = 8;
    compare_models(q, 20, 64);
  }
}

TEST_CASE("cuda: qwen3, gemma2, gemma3 and phi3 models match the CPU for 64 greedy steps", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // Windows of 16 so that the prompts and the 64 steps run past them on the local layers.
  for (Arch arch : {Arch::Qwen3, Arch::Gemma2, Arch::Gemma3, Arch::Phi3}) {
    ModelSpec s;
    s.arch = arch;
    s.n_layers = arch == Arch::Gemma3 ? 6 : 2;
    s.type = GgmlType::F16;
    s.seed = 9;
    if (arch != Arch::Qwen3) s.sliding_window = 16;
    if (arch == Arch::Phi3) s.rope_freqs = RopeFreqs::LongRope;
    compare_models(s, 37, 64);
  }
}

TEST_CASE("cuda: TinyLlama-1.1B shape matches the CPU (PAGODA_GPU_HEAVY=1)", "[gpu][heavy][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const char* heavy = std::getenv("PAGODA_GPU_HEAVY");
  if (!heavy || std::string(heavy) != "1") {
    WARN("TinyLlama-shape comparison skipped: set PAGODA_GPU_HEAVY=1");
    return;
  }
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    ModelSpec s = model_preset("tinyllama-1.1b");
    s.type = type;
    compare_models(s, 40, 64);
  }
}

TEST_CASE("cuda: MoE models (Mixtral-style llama, qwen2moe) match the CPU for 64 greedy steps", "[gpu][moe][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    ModelSpec s;  // 2 layers, dim 256: 4 experts of ff 256, 2 used per token
    s.type = type;
    s.seed = 9;
    s.n_experts = 4;
    s.expert_ff_dim = 256;
    s.name = "llama-moe";
    compare_models(s, 37, 64);
    ModelSpec q;  // 8 experts of ff 256, 2 used, a shared expert of ff 512
    q.arch = Arch::Qwen2Moe;
    q.type = type;
    q.seed = 10;
    q.expert_ff_dim = 256;
    q.name = "qwen2moe";
    compare_models(q, 20, 64);
  }
}
