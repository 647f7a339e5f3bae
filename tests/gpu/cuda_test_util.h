// Shared helpers of the GPU tests: the skip rule, deterministic data that both backends hold
// exactly (values rounded to bf16, so F32, F16 and BF16 copies are identical), step plans over
// explicit block tables, and tolerant comparison.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/gguf/gguf.h"
#include "engine/model/model_writer.h"
#include "engine/backend/step_plan.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/ops.h"
#include "tests/support/skip.h"

// Every GPU test that needs a device starts with this and carries the tag [cuda_device]: without
// a device it skips (tests/support/skip.h), so CTest counts it as skipped, not passed.
#define PAGODA_SKIP_WITHOUT_CUDA()                                                          \
  do {                                                                                      \
    if (!pagoda::testing::requirement_met(pagoda::cuda::device_count() > 0, "no CUDA device")) \
      return;                                                                               \
  } while (0)

namespace pagoda::gputest {

// n floats uniform in [-scale, scale], rounded to bf16 (exact in F32, F16 for |x| < 65504, BF16).
inline std::vector<float> bf16_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = cpu::bf16_to_fp32(cpu::fp32_to_bf16(dist(rng)));
  return v;
}

// A tiny random llama (2 layers, dim 64, 4 heads, 2 KV heads of 16 dims, 1024-token context)
// with bf16 weights, which the CPU and CUDA backends hold exactly; small enough for the CPU
// emulation of CUDA.
inline const gguf::GgufFile& tiny_bf16_model() {
  static const gguf::GgufFile f = [] {
    ModelSpec s;
    s.n_layers = 2;
    s.dim = 64;
    s.ff_dim = 128;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.ctx = 1024;
    s.type = GgmlType::BF16;
    s.seed = 21;
    return gguf::GgufFile::from_bytes(build_model(s).to_bytes(), "tiny-bf16.gguf");
  }();
  return f;
}

// A random model of `arch` small enough for the emulation to run whole: dim 64, 2 layers (gemma3:
// 6, five local then a global one), 4 heads (2 KV heads) of 16 dims, ff 128, the built-in
// 260-token vocabulary, windows of 8 (gemma2/gemma3/phi3), qwen2moe with 4 experts of ff 64.
inline ModelSpec tiny_arch_spec(Arch arch, GgmlType type) {
  ModelSpec s;
  s.arch = arch;
  s.name = std::string("tiny-") + arch_name(arch);
  s.n_layers = arch == Arch::Gemma3 ? 6 : 2;  // gemma3: 5 local layers, then a global one
  s.dim = 64;
  s.ff_dim = 128;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ctx = 256;
  s.type = type;
  s.seed = 31 + static_cast<uint64_t>(arch);
  if (arch == Arch::Gemma2 || arch == Arch::Gemma3 || arch == Arch::Phi3) s.sliding_window = 8;
  if (arch == Arch::Phi3) s.rope_freqs = RopeFreqs::LongRope;
  if (arch == Arch::Qwen2Moe || arch == Arch::Qwen3Moe) {
    s.n_experts = 4;
    s.expert_ff_dim = 64;
  }
  // qwen3moe as Qwen3-30B-A3B has it: heads wider than dim / heads (q width 128 over dim 64).
  if (arch == Arch::Qwen3Moe) s.head_dim = 32;
  return s;
}

// A sequence of a test step: its block table, tokens already cached, tokens in this step.
struct TestSeq {
  std::vector<int32_t> blocks;
  int n_past = 0;
  int n_new = 1;
};

// Builds a StepPlan for `seqs` (tokens numbered 0..n-1 so that embed() picks row t of a table).
inline StepPlan make_plan(const std::vector<TestSeq>& seqs, int block_size) {
  StepPlan p;
  for (size_t si = 0; si < seqs.size(); ++si) {
    const TestSeq& s = seqs[si];
    SeqInStep e;
    e.seq_id = si;
    e.first_token = p.n_tokens();
    e.n_tokens = s.n_new;
    e.n_past = s.n_past;
    e.block_table_offset = static_cast<int32_t>(p.block_tables.size());
    e.n_blocks = static_cast<int32_t>(s.blocks.size());
    p.block_tables.insert(p.block_tables.end(), s.blocks.begin(), s.blocks.end());
    for (int i = 0; i < s.n_new; ++i) {
      const int pos = s.n_past + i;
      p.tokens.push_back(p.n_tokens());
      p.positions.push_back(pos);
      p.slots.push_back(s.blocks[static_cast<size_t>(pos / block_size)] * block_size +
                        pos % block_size);
      p.token_seq.push_back(static_cast<int32_t>(si));
    }
    p.seqs.push_back(e);
    if (s.n_new > 0) p.logit_rows.push_back(p.n_tokens() - 1);
  }
  return p;
}

// A sequence that whole-model tests feed step by step: its block table (blocks of `block`
// tokens), every token so far (prompt, then the fed ones) and how many are in the cache.
struct FedSeq {
  std::vector<int32_t> table;
  std::vector<int32_t> tokens;
  int n_cached = 0;
};

// Adds tokens [n_cached, end) of `s` to the plan with one logit row at the end (none when
// `logits` is false: a prefill chunk before the prompt's last); `prefill`: a chunk of the
// prompt (SeqInStep::prefill), not a decode.
inline void add_fed(StepPlan& p, const FedSeq& s, int end, int block, bool logits = true, bool prefill = false) {
  SeqInStep e;
  e.seq_id = p.seqs.size();
  e.prefill = prefill;
  e.first_token = p.n_tokens();
  e.n_tokens = end - s.n_cached;
  e.n_past = s.n_cached;
  e.block_table_offset = static_cast<int32_t>(p.block_tables.size());
  e.n_blocks = (end + block - 1) / block;
  p.block_tables.insert(p.block_tables.end(), s.table.begin(), s.table.begin() + e.n_blocks);
  for (int i = s.n_cached; i < end; ++i) {
    p.tokens.push_back(s.tokens[static_cast<size_t>(i)]);
    p.positions.push_back(i);
    p.slots.push_back(s.table[static_cast<size_t>(i / block)] * block + i % block);
    p.token_seq.push_back(static_cast<int32_t>(p.seqs.size()));
  }
  p.seqs.push_back(e);
  if (logits) p.logit_rows.push_back(p.n_tokens() - 1);
}

// Loads `values` (rows x cols, bf16-exact) into an F32 activation of `b` through embed():
// the current step's tokens must be 0..rows-1.
inline Tensor activation_from(Backend& b, const std::vector<float>& values, int64_t rows,
                              int64_t cols) {
  Tensor table = b.upload_weight(values.data(), GgmlType::F32, rows, cols);
  Tensor x = b.alloc(rows, cols);
  b.embed(table, x);
  return x;
}

inline std::vector<float> read_all(Backend& b, const Tensor& x, int64_t rows) {
  std::vector<float> v(static_cast<size_t>(rows * x.cols));
  b.read(x, rows, v.data());
  return v;
}

// Whether the two largest of `logits` lie within 2% (`frac`; of the largest, plus 1) of each
// other: a near-tie, where rounding differences between backends may flip the argmax.
inline bool near_tie(const std::vector<float>& logits, float frac = 0.02f) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : logits) {
    if (x > a) {
      b = a;
      a = x;
    } else if (x > b) {
      b = x;
    }
  }
  return a - b < frac * (std::fabs(a) + 1.0f);
}

// ||a - b|| / ||b||: the logit comparisons' error measure.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// |a - b| <= atol + rtol * |b| element-wise; reports the first few mismatches.
inline void require_close(const std::vector<float>& a, const std::vector<float>& b, float atol,
                          float rtol, const std::string& what) {
  REQUIRE(a.size() == b.size());
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    const double lim = atol + rtol * std::fabs(static_cast<double>(b[i]));
    if (!(d <= lim)) {
      if (bad < 5) UNSCOPED_INFO(what << ": [" << i << "] gpu " << a[i] << " cpu " << b[i]);
      ++bad;
    }
    worst = std::max(worst, d);
  }
  INFO(what << ": " << bad << " of " << a.size() << " outside tolerance, worst |diff| " << worst);
  CHECK(bad == 0);
}

}  // namespace pagoda::gputest
