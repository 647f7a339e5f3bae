// Mixture-of-experts routing on the device (kernels/cuda/moe_route.cu) against the CPU's
// cpu::moe_route_row and cpu::moe_group, ties and a flat row included; and CudaBackend's
// moe_ffn_routed (routing, grouping and the grouped GEMVs' counts on the device) against its
// moe_ffn fed the host's routing of the same logits. Skips (CTest: Skipped) without a CUDA
// device.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/backend_cuda.h"
#include "kernels/cpu/moe.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/quant_blocks.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

// Router logits [n x ld]: bf16-exact values with ties (row i's last expert equals its first;
// row 1 entirely flat), the shared gate logit in column n_experts.
std::vector<float> router_logits(int n, int ne, int ld, uint32_t seed) {
  std::vector<float> v = bf16_values(static_cast<size_t>(n * ld), seed, 3.0f);
  for (int i = 0; i < n; ++i) {
    float* row = v.data() + static_cast<size_t>(i) * ld;
    row[ne - 1] = row[0];
    if (i == 1)
      for (int e = 0; e < ne; ++e) row[e] = 0.5f;
  }
  return v;
}

}  // namespace

TEST_CASE("cuda: moe_route gives cpu::moe_route_row's experts and weights and cpu::moe_group's grouping",
          "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (int ne : {4, 60, 128}) {
    for (int k : {1, 2, 8}) {
      if (k > ne) continue;
      for (int n : {1, 3, 8}) {
        for (bool normalize : {false, true}) {
          const bool shared = normalize == (ne == 60);  // both ways over the cases
          INFO("n_experts " << ne << " k " << k << " n " << n << " normalize " << normalize << " shared " << shared);
          const int ld = ne + 3;
          const auto logits = router_logits(n, ne, ld, static_cast<uint32_t>(ne * 100 + k * 10 + n));
          // The CPU's routing and grouping.
          std::vector<int32_t> ids(static_cast<size_t>(n * k));
          std::vector<float> weights(ids.size()), shared_w(static_cast<size_t>(n));
          for (int i = 0; i < n; ++i) {
            const float* row = logits.data() + static_cast<size_t>(i) * ld;
            cpu::moe_route_row(row, ne, k, normalize, ids.data() + i * k, weights.data() + i * k);
            shared_w[static_cast<size_t>(i)] = 1.0f / (1.0f + std::exp(-row[ne]));
          }
          cpu::MoeGroups g;
          cpu::moe_group(ids.data(), n, k, ne, g);

          const cuda::MoeRouteLayout L = cuda::moe_route_layout(n, k, ne);
          void *d_logits = nullptr, *d_buf = nullptr;
          CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * sizeof(float)));
          CUDA_CHECK(cudaMalloc(&d_buf, L.bytes));
          CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
          cuda::moe_route(static_cast<const float*>(d_logits), ld, n, ne, k, normalize, shared, d_buf, nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<int32_t> w(L.bytes / 4);
          CUDA_CHECK(cudaMemcpy(w.data(), d_buf, L.bytes, cudaMemcpyDeviceToHost));
          cudaFree(d_logits);
          cudaFree(d_buf);
          const auto floats = [&](size_t at, size_t count) {
            std::vector<float> f(count);
            std::memcpy(f.data(), w.data() + at, count * sizeof(float));
            return f;
          };
          const size_t rows = static_cast<size_t>(n * k);
          for (size_t r = 0; r < rows; ++r) {
            INFO("entry " << r);
            CHECK(w[L.place + r] == g.place[r]);
            CHECK(w[L.token_of_row + r] == g.entries[r] / k);
          }
          // Weights within the last bit of the double exp (equal bits under the emulation).
          require_close(floats(L.weights, rows), weights, 0.0f, 3e-7f, "weights");
          if (shared) require_close(floats(L.shared_weights, static_cast<size_t>(n)), shared_w, 0.0f, 3e-7f, "shared");
          for (int c = 1; c <= cuda::kMoeRouteMaxTokens; ++c) {
            std::vector<int32_t> want;
            for (int e = 0; e < ne; ++e)
              if (g.offsets[static_cast<size_t>(e) + 1] - g.offsets[static_cast<size_t>(e)] == c)
                want.insert(want.end(), {e, g.offsets[static_cast<size_t>(e)]});
            INFO("count " << c);
            REQUIRE(w[L.n_groups + static_cast<size_t>(c)] == static_cast<int32_t>(want.size() / 2));
            REQUIRE(static_cast<int>(want.size() / 2) <= L.table_cap[c]);
            const std::vector<int32_t> got(w.begin() + static_cast<long>(L.table_at[c]),
                                           w.begin() + static_cast<long>(L.table_at[c] + want.size()));
            CHECK(got == want);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda: moe_ffn_routed equals moe_ffn given the host's routing of the same logits", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int ne = 8, k = 2;
  const int64_t dim = 256, ff = 256;
  CudaBackend gpu;  // quantized weights: the int8 GEMV's grouped launches
  KvCacheConfig kv;
  kv.n_layers = 1;
  kv.num_blocks = 4;
  kv.n_kv_heads = 1;
  kv.head_dim = 64;
  gpu.init_kv_cache(kv);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0}) {
    const auto gate = test::random_blocks(t, ne * ff, dim, 61, 0x2c00);
    const auto up = test::random_blocks(t, ne * ff, dim, 62, 0x2c00);
    const auto down = test::random_blocks(t, ne * dim, ff, 63, 0x2c00);
    ExpertWeights ew;
    ew.gate = gpu.upload_weight(gate.data(), t, ne * ff, dim);
    ew.up = gpu.upload_weight(up.data(), t, ne * ff, dim);
    ew.down = gpu.upload_weight(down.data(), t, ne * dim, ff);
    ew.n_experts = ne;
    CHECK_FALSE(gpu.moe_routes_on_device(ew, cuda::kMoeRouteMaxTokens + 1));
    for (int n : {1, 5, 8}) {
      for (bool shared : {false, true}) {
        INFO(ggml_type_info(t).name << " n " << n << " shared " << shared);
        REQUIRE(gpu.moe_routes_on_device(ew, n));
        const int ld = ne + 1;
        const auto logits = router_logits(n, ne, ld, 70 + static_cast<uint32_t>(n));
        const auto xv = bf16_values(static_cast<size_t>(n * dim), 71 + static_cast<uint32_t>(n), 0.5f);
        const auto sv = bf16_values(static_cast<size_t>(n * dim), 72 + static_cast<uint32_t>(n), 0.5f);
        std::vector<int32_t> ids(static_cast<size_t>(n * k));
        std::vector<float> weights(ids.size()), shared_w(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const float* row = logits.data() + static_cast<size_t>(i) * ld;
          cpu::moe_route_row(row, ne, k, true, ids.data() + i * k, weights.data() + i * k);
          shared_w[static_cast<size_t>(i)] = 1.0f / (1.0f + std::exp(-row[ne]));
        }
        std::vector<float> res[2];
        for (int run = 0; run < 2; ++run) {
          gpu.begin_step(make_plan({TestSeq{{0, 1, 2, 3}, 0, n}}, 16));
          Tensor x = activation_from(gpu, xv, n, dim), sh = activation_from(gpu, sv, n, dim);
          Tensor lg = activation_from(gpu, logits, n, ld), out = gpu.alloc(n, dim);
          if (run == 0)
            gpu.moe_ffn_routed(ew, x, lg, k, true, shared ? &sh : nullptr, out, n);
          else
            gpu.moe_ffn(ew, x, ids.data(), weights.data(), k, shared ? &sh : nullptr, shared_w.data(), out, n);
          res[run] = read_all(gpu, out, n);
        }
        float scale = 0;
        for (float v : res[1]) scale = std::max(scale, std::fabs(v));
        // The same experts and sums; weights may differ in their last bit on a GPU (bit-equal
        // under the emulation).
        require_close(res[0], res[1], 1e-6f * scale, 1e-6f, "moe_ffn_routed vs moe_ffn");
      }
    }
  }
}
