// The CUDA backend's fused ops against the compositions they replace and against the CPU:
// add_rms_norm and add_rms_norm_matmuls (residual add, RMSNorm, and the matmuls' bf16 / int8
// input forms from the same launch) over every weight mode and a mix of weight types, and
// rope_store_kv (RoPE of Q and K with the K/V store) over the KV element types and both RoPE
// conventions. CudaBackend's override must equal Backend's default composition, run on the same
// CudaBackend, bit for bit (the fused kernels share the separate kernels' device code); both are
// held to the CpuBackend with the tolerances of the separate ops' tests. Skips (CTest: Skipped)
// without a CUDA device.
#include <catch2/catch.hpp>

#include <cstring>
#include <deque>
#include <memory>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "kernels/cpu/quants.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

KvCacheConfig cache(KvTypes types, int n_kv_heads, int head_dim) {
  KvCacheConfig c;
  c.n_layers = 2;
  c.num_blocks = 8;
  c.block_size = 16;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.types = types;
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A [rows x cols] weight of `type` from bf16-exact values, on backend b. The host bytes go to
// `keep`: the CPU backend's weights are views of them.
Tensor weight(Backend& b, GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
              std::deque<std::vector<float>>& keep_f32, std::deque<std::vector<uint8_t>>& keep) {
  const auto& v = keep_f32.emplace_back(bf16_values(static_cast<size_t>(rows * cols), seed, 0.5f));
  if (type == GgmlType::F32) return b.upload_weight_f32(v.data(), rows, cols);
  auto& bits = keep.emplace_back(ggml_row_size(type, cols) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    cpu::quantize_row(type, v.data() + r * cols, bits.data() + ggml_row_size(type, cols) * static_cast<size_t>(r), cols);
  return b.upload_weight(bits.data(), type, rows, cols);
}

}  // namespace

TEST_CASE("cuda: add_rms_norm and add_rms_norm_matmuls equal the separate ops and the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const CudaWeights mode = GENERATE(CudaWeights::Quantized, CudaWeights::QuantizedF32, CudaWeights::Bf16);
  CudaBackendOptions opts;
  opts.weights = mode;
  CudaBackend gpu(opts);
  CpuBackend cpu(2);
  const int cols = 256;  // Q4_K's block; the int8 form's 32
  // Matrices reading the same input, of the types that take each path: the int8 (or f32) GEMV
  // and the tensor-core GEMM, the bf16 GEMV / cuBLAS, the F32 GEMM.
  const GgmlType types[4] = {GgmlType::Q8_0, GgmlType::BF16, GgmlType::Q4_K, GgmlType::F32};
  const int64_t rows[4] = {96, 64, 32, 16};
  for (Backend* b : {static_cast<Backend*>(&gpu), static_cast<Backend*>(&cpu)}) b->init_kv_cache(cache(KvTypes(GgmlType::F16), 2, 64));
  std::deque<std::vector<float>> keep_f32;
  std::deque<std::vector<uint8_t>> keep;
  for (int n : {1, 5, 12}) {  // 12: above the GEMVs' row limits
    for (bool with_residual : {false, true}) {
      INFO("mode " << cuda_weights_name(mode) << " n " << n << " residual " << with_residual);
      const StepPlan plan = make_plan({TestSeq{{0}, 0, n}}, 16);
      const auto xv = bf16_values(static_cast<size_t>(n * cols), 7 + n, 2.0f);
      const auto yv = bf16_values(static_cast<size_t>(n * cols), 8 + n, 2.0f);
      const auto nv = bf16_values(static_cast<size_t>(cols), 9);
      // [run][0] x after, [1] xn, [2..5] the matmuls; runs: fused GPU, composed GPU, CPU.
      std::vector<float> got[3][6];
      for (int run = 0; run < 3; ++run) {
        Backend& b = run < 2 ? static_cast<Backend&>(gpu) : static_cast<Backend&>(cpu);
        b.begin_step(plan);
        Tensor x = activation_from(b, xv, n, cols), y = activation_from(b, yv, n, cols);
        Tensor norm = b.upload_weight(nv.data(), GgmlType::F32, 1, cols);
        Tensor w[4], o[4];
        for (int j = 0; j < 4; ++j) {
          w[j] = weight(b, types[j], rows[j], cols, 20 + j, keep_f32, keep);
          o[j] = b.alloc(n, rows[j]);
        }
        const Tensor* ws[4] = {&w[0], &w[1], &w[2], &w[3]};
        Tensor* os[4] = {&o[0], &o[1], &o[2], &o[3]};
        // xn is the residual itself, as the model passes it (the sub-block's output buffer).
        Tensor& xn = y;
        const Tensor* residual = with_residual ? &y : nullptr;
        if (run == 1)
          gpu.Backend::add_rms_norm_matmuls(x, residual, norm, 1e-5f, xn, ws, 4, os, n);
        else
          b.add_rms_norm_matmuls(x, residual, norm, 1e-5f, xn, ws, 4, os, n);
        got[run][0] = read_all(b, x, n);
        got[run][1] = read_all(b, xn, n);
        for (int j = 0; j < 4; ++j) got[run][2 + j] = read_all(b, o[j], n);
      }
      for (int k = 0; k < 6; ++k) {
        INFO("output " << k);
        CHECK(same_bits(got[0][k], got[1][k]));
      }
      require_close(got[0][0], got[2][0], 0.0f, 0.0f, "x");
      require_close(got[0][1], got[2][1], 1e-5f, 1e-5f, "xn");
      // The GPU rounds matmul inputs to bf16 or int8 where the CPU may keep f32 (outputs ~2).
      for (int j = 0; j < 3; ++j) require_close(got[0][2 + j], got[2][2 + j], 5e-2f, 2e-2f, "matmul");
      require_close(got[0][5], got[2][5], 1e-4f, 1e-4f, "F32 matmul");

      // add_rms_norm alone, out a separate buffer.
      std::vector<float> alone[2][2];
      for (int run = 0; run < 2; ++run) {
        gpu.begin_step(plan);
        Tensor x = activation_from(gpu, xv, n, cols), y = activation_from(gpu, yv, n, cols);
        Tensor norm = gpu.upload_weight(nv.data(), GgmlType::F32, 1, cols), out = gpu.alloc(n, cols);
        const Tensor* residual = with_residual ? &y : nullptr;
        if (run == 0) gpu.add_rms_norm(x, residual, norm, 1e-5f, out, n);
        else gpu.Backend::add_rms_norm(x, residual, norm, 1e-5f, out, n);
        alone[run][0] = read_all(gpu, x, n);
        alone[run][1] = read_all(gpu, out, n);
      }
      CHECK(same_bits(alone[0][0], alone[1][0]));
      CHECK(same_bits(alone[0][1], alone[1][1]));
    }
  }
}

TEST_CASE("cuda: rope_store_kv equals rope, rope and store_kv, and the CPU", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const KvTypes types = GENERATE(KvTypes(GgmlType::F16), KvTypes(GgmlType::Q8_0, GgmlType::F32), KvTypes(GgmlType::F32, GgmlType::Q8_0));
  const bool neox = GENERATE(false, true);
  const int n_kv = 2, n_heads = 6, hd = 40;
  INFO(kv_types_name(types) << " neox " << neox);
  CudaBackend gpu;
  CpuBackend cpu(2);
  for (Backend* b : {static_cast<Backend*>(&gpu), static_cast<Backend*>(&cpu)}) b->init_kv_cache(cache(types, n_kv, hd));
  // Two sequences over scattered blocks, one starting mid-block far into its context.
  const StepPlan plan = make_plan({TestSeq{{5, 2}, 0, 20}, TestSeq{{7, 0, 3, 1}, 50, 9}}, 16);
  const int n = plan.n_tokens();
  const auto qv = bf16_values(static_cast<size_t>(n * n_heads * hd), 41, 2.0f);
  const auto kv = bf16_values(static_cast<size_t>(n * n_kv * hd), 42, 2.0f);
  const auto vv = bf16_values(static_cast<size_t>(n * n_kv * hd), 43, 2.0f);
  const auto ffv = bf16_values(static_cast<size_t>(hd / 4), 44, 0.5f);
  for (int n_rot : {hd, hd / 2}) {
    for (bool factors : {false, true}) {
      INFO("n_rot " << n_rot << " freq_factors " << factors);
      std::vector<float> ff(static_cast<size_t>(n_rot / 2), 1.0f);
      if (factors)
        for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + std::abs(ffv[i % ffv.size()]) * 4.0f;
      std::vector<float> q[3], k[3], blocks[3];
      for (int run = 0; run < 3; ++run) {
        Backend& b = run < 2 ? static_cast<Backend&>(gpu) : static_cast<Backend&>(cpu);
        b.begin_step(plan);
        RopeConfig rc;
        rc.head_dim = n_rot;
        rc.freq_base = neox ? 1000000.0f : 10000.0f;
        rc.freq_scale = 0.5f;
        rc.neox = neox;
        if (factors) rc.freq_factors = b.upload_weight(ff.data(), GgmlType::F32, 1, n_rot / 2);
        Tensor tq = activation_from(b, qv, n, n_heads * hd), tk = activation_from(b, kv, n, n_kv * hd),
               tv = activation_from(b, vv, n, n_kv * hd);
        if (run == 1) gpu.Backend::rope_store_kv(1, tq, tk, tv, n_heads, n_kv, rc);
        else b.rope_store_kv(1, tq, tk, tv, n_heads, n_kv, rc);
        q[run] = read_all(b, tq, n);
        k[run] = read_all(b, tk, n);
        const size_t elems = static_cast<size_t>(16 * n_kv * hd);
        std::vector<float> kb(elems), vb(elems);
        for (int block = 0; block < 8; ++block) {
          b.read_kv_block(1, block, kb.data(), vb.data());
          blocks[run].insert(blocks[run].end(), kb.begin(), kb.end());
          blocks[run].insert(blocks[run].end(), vb.begin(), vb.end());
        }
      }
      CHECK(same_bits(q[0], q[1]));
      CHECK(same_bits(k[0], k[1]));
      CHECK(same_bits(blocks[0], blocks[1]));
      require_close(q[0], q[2], 1e-5f, 1e-5f, "q");
      require_close(k[0], k[2], 1e-5f, 1e-5f, "k");
      // The cache's rounding (f16, int8 groups) of values that may differ in the last bit.
      require_close(blocks[0], blocks[2], 2e-2f, 1e-3f, "cache");
    }
  }
}
