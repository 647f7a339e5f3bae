// The bert encoder's layers on the CudaBackend (BertBackendForward) against the CPU path of
// BertModel on the same random-weight files: embeddings of a batch of inputs of mixed lengths
// (mean and CLS pooling, F32 and F16 weights; the GPU runs F16 matrices as bf16) with cosine
// >= 0.9999 per input, and an xlm-roberta reranker's scores within 2e-3 of the CPU's; plus the
// kernels alone: layer_norm and encoder_attention against kernels/cpu/encoder_ops.h.
// Skips (CTest: Skipped) without a CUDA device; runs under the emulator (scripts/gpu-check.sh emu).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/encoder/bert_model.h"
#include "engine/encoder/bert_writer.h"
#include "engine/gguf/gguf.h"
#include "kernels/cpu/encoder_ops.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/cosine.h"
#include "tests/support/test_files.h"

using namespace pagoda;
using namespace pagoda::encoder;

namespace {

using pagoda::testing::cosine;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("cuda: layer_norm and encoder_attention match the CPU kernels", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackend gpu;
  const int heads = 3, hd = 16, d = heads * hd;
  const std::vector<int64_t> starts{0, 5, 6, 40, 47};  // inputs of 5, 1, 34 and 7 rows
  const int64_t n = starts.back();
  const auto x = random_floats(size_t(n * d), 1), g = random_floats(size_t(d), 2), b = random_floats(size_t(d), 3);
  const auto q = random_floats(size_t(n * d), 4), k = random_floats(size_t(n * d), 5), v = random_floats(size_t(n * d), 6);
  std::vector<float> want_norm(x.size()), want_attn(x.size());
  cpu::layer_norm_rows(x.data(), n, d, g.data(), b.data(), 1e-5f, want_norm.data());
  cpu::ThreadPool pool(1);
  cpu::encoder_attention(pool, starts, heads, hd, q.data(), k.data(), v.data(), want_attn.data());

  Tensor tx = gpu.alloc(n, d), tq = gpu.alloc(n, d), tk = gpu.alloc(n, d), tv = gpu.alloc(n, d), to = gpu.alloc(n, d);
  const Tensor tg = gpu.upload_weight_f32(g.data(), 1, d), tb = gpu.upload_weight_f32(b.data(), 1, d);
  gpu.write(tx, x.data(), n);
  gpu.write(tq, q.data(), n), gpu.write(tk, k.data(), n), gpu.write(tv, v.data(), n);
  gpu.layer_norm(tx, tg, tb, 1e-5f, tx, n);  // in place, as the encoder runs it
  gpu.encoder_attention(tq, tk, tv, to, starts, heads, hd);
  std::vector<float> got_norm(x.size()), got_attn(x.size());
  gpu.read(tx, n, got_norm.data());
  gpu.read(to, n, got_attn.data());
  double worst_norm = 0, worst_attn = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst_norm = std::max(worst_norm, double(std::fabs(got_norm[i] - want_norm[i])));
    worst_attn = std::max(worst_attn, double(std::fabs(got_attn[i] - want_attn[i])));
  }
  INFO("layer_norm worst " << worst_norm << ", attention worst " << worst_attn);
  CHECK(worst_norm < 1e-4);
  CHECK(worst_attn < 1e-5);
}

TEST_CASE("cuda: bert embeddings and reranker scores match the CPU path", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  testing::ScratchDir dir("cuda-bert");
  struct Case {
    GgmlType type;
    Pooling pooling;
    bool xlm;
  };
  for (const Case c : {Case{GgmlType::F32, Pooling::Mean, false}, Case{GgmlType::F16, Pooling::Cls, false},
                       Case{GgmlType::F32, Pooling::Rank, true}}) {
    BertSpec spec;
    spec.type = c.type;
    spec.pooling = c.pooling;
    spec.xlm_roberta = c.xlm;
    spec.seed = 31;
    const std::string path = dir.file("m" + std::to_string(int(c.pooling)) + ".gguf");
    write_bert_model(spec, path);
    const auto file = gguf::GgufFile::open(path);
    const BertModel cpu(file, 1);
    const BertModel gpu(file, 1, std::make_unique<CudaBackend>(), 256);
    std::mt19937 rng(8);
    std::vector<EncoderInput> inputs;
    for (int len : {1, 9, 33, 128, 64}) {
      EncoderInput in;
      for (int i = 0; i < len; ++i) in.tokens.push_back(int32_t(rng() % uint32_t(cpu.config().vocab_size)));
      if (c.pooling == Pooling::Rank) in.segment_b = len / 2;
      inputs.push_back(std::move(in));
    }
    const auto want = cpu.embed_batch(inputs);
    const auto got = gpu.embed_batch(inputs);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("type " << int(c.type) << " pooling " << int(c.pooling) << ", input " << i << " of "
                   << inputs[i].tokens.size() << " tokens");
      REQUIRE(got[i].size() == want[i].size());
      if (c.pooling == Pooling::Rank) {
        CHECK(std::fabs(got[i][0] - want[i][0]) <= 2e-3);
      } else {
        CHECK(cosine(got[i], want[i]) >= 0.9999);
      }
    }
  }
}
