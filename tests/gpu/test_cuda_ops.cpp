// CudaBackend ops against the CpuBackend (the oracle) through the Backend interface, over odd
// shapes: element-wise ops, RMSNorm, RoPE (both conventions), GEMMs per weight type, the
// logits gather, and store_kv. Inputs are bf16-exact so both backends start from identical
// values. Skips (CTest: Skipped) without a CUDA device.
#include <catch2/catch.hpp>

#include <memory>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/loop/engine.h"
#include "engine/loop/kv_budget.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

// Both backends with the same small KV cache, stepping through the same plans.
struct Pair {
  CpuBackend cpu{2};
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  Backend* both[2] = {&cpu, gpu.get()};

  explicit Pair(KvCacheConfig cfg) {  // cfg.types: F16 unless the test says
    for (Backend* b : both) b->init_kv_cache(cfg);
  }
  void step(const StepPlan& plan) {
    for (Backend* b : both) b->begin_step(plan);
  }
};

KvCacheConfig small_cache(int n_kv_heads = 2, int head_dim = 64, int num_blocks = 64,
                          int block_size = 16) {
  KvCacheConfig c;
  c.n_layers = 2;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  return c;
}

// One sequence of n new tokens (positions n_past..), blocks 0.. in order.
StepPlan linear_plan(int n, int n_past = 0, int block_size = 16) {
  TestSeq s;
  s.n_past = n_past;
  s.n_new = n;
  for (int b = 0; b * block_size < n_past + n; ++b) s.blocks.push_back(b);
  return make_plan({s}, block_size);
}

}  // namespace

TEST_CASE("cuda: backend availability is reported", "[gpu]") {
  std::string why;
  if (cuda::device_count() == 0) {
    CHECK_FALSE(cuda_available(&why));
    CHECK_FALSE(why.empty());
    CHECK_THROWS_WITH(make_cuda_backend(), Catch::Contains("CUDA"));
    WARN("no CUDA device: only the no-device path was checked (" << why << ")");
    return;
  }
  CHECK(cuda_available(&why));
  const MemoryInfo m = make_cuda_backend()->memory_info();
  CHECK(m.device);
  CHECK(m.total_bytes > 0);
  CHECK(m.free_bytes <= m.total_bytes);
  // The KV budget's device rule (engine/loop/kv_budget.h), in bytes (blocks of one byte).
  EngineConfig cfg;
  cfg.device_memory_fraction = 0.9;
  CHECK(kv_budget(cfg, m, 1, 4096).blocks <= m.total_bytes);
  cfg.device_memory_fraction = 1.5;
  CHECK_THROWS(kv_budget(cfg, m, 1, 4096));
}

TEST_CASE("cuda: element-wise ops (also the gemma ones), RMSNorm and logits gather match the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  Pair p(small_cache());
  for (int n : {1, 3, 17}) {
    for (int cols : {1, 31, 257, 2048}) {
      INFO("n " << n << " cols " << cols);
      const StepPlan plan = linear_plan(n);
      p.step(plan);
      const auto xv = bf16_values(static_cast<size_t>(n * cols), 1 + n + cols, 2.0f);
      const auto yv = bf16_values(static_cast<size_t>(n * cols), 2 + n + cols, 2.0f);
      const auto wv = bf16_values(static_cast<size_t>(cols), 3 + cols);
      std::vector<float> res[2][8];
      for (int i = 0; i < 2; ++i) {
        Backend& b = *p.both[i];
        Tensor x = activation_from(b, xv, n, cols);
        Tensor y = activation_from(b, yv, n, cols);
        Tensor w = b.upload_weight(wv.data(), GgmlType::F32, 1, cols);
        Tensor out = b.alloc(n, cols);
        b.rms_norm(x, w, 1e-5f, out, n);
        res[i][0] = read_all(b, out, n);
        b.silu_mul(x, y, out, n);
        res[i][1] = read_all(b, out, n);
        b.add(x, y, n);
        res[i][2] = read_all(b, x, n);
        b.add_bias(y, w, n);
        res[i][3] = read_all(b, y, n);
        Tensor g = b.alloc(n, cols);
        b.gather_logit_rows(x, g);
        res[i][4] = read_all(b, g, static_cast<int64_t>(plan.logit_rows.size()));
        b.gelu_mul(x, y, out, n);  // the gemma ops
        res[i][5] = read_all(b, out, n);
        b.scale(out, 1.7f, n);
        res[i][6] = read_all(b, out, n);
        b.softcap(out, 3.0f, n);
        res[i][7] = read_all(b, out, n);
      }
      require_close(res[1][0], res[0][0], 1e-5f, 1e-5f, "rms_norm");
      require_close(res[1][1], res[0][1], 1e-6f, 1e-5f, "silu_mul");
      require_close(res[1][2], res[0][2], 0.0f, 0.0f, "add");
      require_close(res[1][3], res[0][3], 0.0f, 0.0f, "add_bias");
      require_close(res[1][4], res[0][4], 0.0f, 0.0f, "gather_logit_rows");
      require_close(res[1][5], res[0][5], 1e-6f, 1e-5f, "gelu_mul");
      require_close(res[1][6], res[0][6], 1e-6f, 1e-5f, "scale");
      require_close(res[1][7], res[0][7], 1e-6f, 1e-5f, "softcap");
    }
  }
}

TEST_CASE("cuda: RoPE matches the CPU for both conventions", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  Pair p(small_cache(2, 64, 256));
  for (bool neox : {false, true}) {
    for (int head_dim : {64, 128, 80}) {
      for (int n_rot : {head_dim, head_dim / 2}) {
        for (int n_past : {0, 7, 3000}) {
          INFO("neox " << neox << " head_dim " << head_dim << " n_rot " << n_rot << " n_past "
                       << n_past);
          const int n = 5, n_heads = 3, cols = n_heads * head_dim;
          p.step(linear_plan(n, n_past));
          RopeConfig rc;
          rc.head_dim = n_rot;
          rc.freq_base = neox ? 1000000.0f : 10000.0f;
          rc.freq_scale = n_past == 7 ? 0.25f : 1.0f;
          rc.neox = neox;
          const auto xv = bf16_values(static_cast<size_t>(n * cols), 11 + head_dim + n_rot);
          std::vector<float> res[2];
          for (int i = 0; i < 2; ++i) {
            Tensor x = activation_from(*p.both[i], xv, n, cols);
            p.both[i]->rope(x, n_heads, rc);
            res[i] = read_all(*p.both[i], x, n);
          }
          require_close(res[1], res[0], 1e-5f, 1e-5f, "rope");
        }
      }
    }
  }
}

TEST_CASE("cuda: GEMM matches the CPU for every weight type", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  Pair p(small_cache());
  struct Case {
    GgmlType type;
    int rows, cols;
  };
  const Case cases[] = {
      {GgmlType::F32, 33, 96},    {GgmlType::F16, 129, 64},  {GgmlType::BF16, 7, 160},
      {GgmlType::Q8_0, 65, 320},  {GgmlType::Q4_0, 31, 256}, {GgmlType::Q4_K, 17, 512},
      {GgmlType::Q6_K, 40, 768},  {GgmlType::F16, 9, 100},  // rows not in 8-value pieces: cuBLAS
  };
  for (const Case& c : cases) {
    for (int n : {1, 3, 4, 5, 37}) {  // up to kGemvMaxRows (4): kernels/cuda/gemv.cu; beyond: cuBLAS
      INFO(ggml_type_info(c.type).name << " " << c.rows << "x" << c.cols << " n " << n);
      p.step(linear_plan(n));
      auto wf = bf16_values(static_cast<size_t>(c.rows * c.cols), 21 + c.cols, 0.5f);
      auto xv = bf16_values(static_cast<size_t>(n * c.cols), 22 + n);
      if (c.type == GgmlType::F32) {  // values bf16 cannot hold: a bf16 product would be ~1e-3 off
        for (size_t i = 0; i < wf.size(); ++i) wf[i] *= 1.0f + 0.0037f * static_cast<float>(i % 7);
        for (size_t i = 0; i < xv.size(); ++i) xv[i] *= 1.0f + 0.0041f * static_cast<float>(i % 5);
      }
      std::vector<uint8_t> wq(ggml_row_size(c.type, c.cols) * static_cast<size_t>(c.rows));
      for (int r = 0; r < c.rows; ++r)
        cpu::quantize_row(c.type, wf.data() + static_cast<size_t>(r) * c.cols,
                          wq.data() + ggml_row_size(c.type, c.cols) * r, c.cols);
      std::vector<float> res[2];
      for (int i = 0; i < 2; ++i) {
        Backend& b = *p.both[i];
        Tensor w = b.upload_weight(wq.data(), c.type, c.rows, c.cols);
        Tensor x = activation_from(b, xv, n, c.cols);
        Tensor out = b.alloc(n, c.rows);
        b.matmul(w, x, out, n);
        res[i] = read_all(b, out, n);
      }
      const bool plain = c.type == GgmlType::F32 || c.type == GgmlType::F16 ||
                         c.type == GgmlType::BF16;
      // Plain types: identical bf16 products, only the summation order differs. Quantized:
      // the GPU rounds dequantized weights to bf16 and the CPU may quantize x, so allow a few
      // percent of the output scale (a wrong block layout is off by the whole scale).
      float scale = 0;
      for (float v : res[0]) scale = std::max(scale, std::fabs(v));
      if (c.type == GgmlType::F32)  // F32 matrices stay F32 on the GPU: F32 products (no TF32)
        require_close(res[1], res[0], 1e-5f, 1e-5f, "f32 matmul");
      else if (plain)
        require_close(res[1], res[0], 1e-4f, 1e-4f, "matmul");
      else
        require_close(res[1], res[0], 0.03f * scale, 0.0f, "matmul");
    }
  }
}

TEST_CASE("cuda: store_kv writes the same F16, F32 and Q8_0 cache as the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const KvTypes kv_type = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::F32), KvTypes(GgmlType::Q8_0),
                                   KvTypes(GgmlType::F16, GgmlType::Q8_0), KvTypes(GgmlType::Q8_0, GgmlType::F32));
  INFO(kv_types_name(kv_type));
  const int n_kv = 3, hd = 40, bs = 16;  // Q8_0: groups of 8
  KvCacheConfig cfg = small_cache(n_kv, hd, 8, bs);
  cfg.types = kv_type;
  Pair p(cfg);
  // Two sequences with scattered blocks; the second starts mid-block.
  const StepPlan plan = make_plan({TestSeq{{5, 2}, 0, 20}, TestSeq{{7, 0}, 13, 9}}, bs);
  p.step(plan);
  const int n = plan.n_tokens(), kv_dim = n_kv * hd;
  const auto kv = bf16_values(static_cast<size_t>(n * kv_dim), 31, 3.0f);
  const auto vv = bf16_values(static_cast<size_t>(n * kv_dim), 32, 3.0f);
  for (Backend* b : p.both) {
    Tensor k = activation_from(*b, kv, n, kv_dim), v = activation_from(*b, vv, n, kv_dim);
    b->store_kv(1, k, v);
  }
  const size_t elems = static_cast<size_t>(bs * kv_dim);
  for (int block = 0; block < 8; ++block) {
    std::vector<float> k[2], v[2];
    for (int i = 0; i < 2; ++i) {
      k[i].resize(elems);
      v[i].resize(elems);
      p.both[i]->read_kv_block(1, block, k[i].data(), v[i].data());
    }
    INFO("block " << block);
    require_close(k[1], k[0], 0.0f, 0.0f, "K");
    require_close(v[1], v[0], 0.0f, 0.0f, "V");
  }
}
