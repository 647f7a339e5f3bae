// Prefill attention kernel benchmark on the CudaBackend (not a test; built with the GPU tests):
// the tensor-core kernel (--cuda-prefill-attention mma, kernels/cuda/attention_prefill_mma.cu)
// against the exact f32 one, beside the bf16 tensor-core peak measured in the same run.
//
//   bench_cuda_attention [--tokens 512,2048,8192] [--heads 32] [--kv-heads 8] [--head-dim 128]
//                        [--kv-cache-type f16|f32|q8_0] [--reps 5]
//
// Peak: a bf16 x bf16 -> f32 cuBLAS GEMM of 8192^3, best of 10 (2 m n k FLOPs each). Then for
// each length P: one sequence of P tokens from position 0 (one step, causal), an 8B-model head
// layout by default; store_kv once, then attention() timed over --reps calls after a warm-up
// (device synchronised around them), per kernel. FLOPs of a call: 4 * head_dim * n_heads *
// P (P + 1) / 2 (QK^T and PV over the causal half). Prints ms per call, TFLOP/s and the share
// of the measured peak. Query and cache values are zeros (the time does not depend on them).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cuda/backend_cuda.h"

using namespace pagoda;

namespace {

constexpr int kBlock = 16;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) v.push_back(std::stoi(item));
  return v;
}

// Best-of-10 bf16 tensor-core GEMM rate (TFLOP/s) at m = n = k = 8192.
double bf16_peak_tflops() {
  const int n = 8192;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  check(cudaMalloc(&a, size_t(n) * n * 2), "cudaMalloc");
  check(cudaMalloc(&b, size_t(n) * n * 2), "cudaMalloc");
  check(cudaMalloc(&c, size_t(n) * n * 4), "cudaMalloc");
  check(cudaMemset(a, 0, size_t(n) * n * 2), "cudaMemset");
  check(cudaMemset(b, 0, size_t(n) * n * 2), "cudaMemset");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  const float one = 1.0f, zero = 0.0f;
  double best = 1e30;
  for (int rep = 0; rep < 11; ++rep) {
    check(cudaDeviceSynchronize(), "sync");
    const auto t0 = std::chrono::steady_clock::now();
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c,
                     CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("cublasGemmEx failed");
    check(cudaDeviceSynchronize(), "sync");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);  // rep 0 warms up
  }
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * n * double(n) / best / 1e12;
}

int run(int argc, char** argv) {
  std::vector<int> lengths = {512, 2048, 8192};
  int n_heads = 32, n_kv = 8, hd = 128, reps = 5;
  GgmlType kv_type = GgmlType::F16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], v = argv[i + 1];
    if (flag == "--tokens") lengths = int_list(v);
    else if (flag == "--heads") n_heads = std::stoi(v);
    else if (flag == "--kv-heads") n_kv = std::stoi(v);
    else if (flag == "--head-dim") hd = std::stoi(v);
    else if (flag == "--reps") reps = std::max(1, std::stoi(v));
    else if (flag == "--kv-cache-type" && (v == "f16" || v == "f32" || v == "q8_0"))
      kv_type = v == "f16" ? GgmlType::F16 : v == "f32" ? GgmlType::F32 : GgmlType::Q8_0;
    else throw std::invalid_argument("unknown flag or value: " + flag + " " + v);
  }
  const double peak = bf16_peak_tflops();
  std::printf("bf16 tensor-core peak (cuBLAS 8192^3 GEMM): %.0f TFLOP/s\n", peak);
  for (int P : lengths) {
    for (PrefillAttention kind : {PrefillAttention::Mma, PrefillAttention::Exact}) {
      CudaBackendOptions opts;
      opts.prefill_attention = kind;
      auto be = make_cuda_backend(opts);
      const int blocks = (P + kBlock - 1) / kBlock;
      KvCacheConfig cfg;
      cfg.n_layers = 1;
      cfg.num_blocks = blocks;
      cfg.block_size = kBlock;
      cfg.n_kv_heads = n_kv;
      cfg.head_dim = hd;
      cfg.types = KvTypes(kv_type);
      be->init_kv_cache(cfg);
      StepPlan plan;
      SeqInStep s;
      s.n_tokens = P;
      s.n_blocks = blocks;
      plan.seqs.push_back(s);
      for (int b = 0; b < blocks; ++b) plan.block_tables.push_back(b);
      for (int t = 0; t < P; ++t) {
        plan.tokens.push_back(0);
        plan.positions.push_back(t);
        plan.slots.push_back(t);
        plan.token_seq.push_back(0);
      }
      plan.logit_rows.push_back(P - 1);
      be->begin_step(plan);
      Tensor q = be->alloc(P, static_cast<int64_t>(n_heads) * hd), out = be->alloc(P, q.cols);
      Tensor k = be->alloc(P, static_cast<int64_t>(n_kv) * hd), v = be->alloc(P, k.cols);
      for (const Tensor* x : {&q, &k, &v}) check(cudaMemset(x->data, 0, size_t(P) * x->cols * 4), "cudaMemset");
      be->store_kv(0, k, v);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      be->attention(0, q, out, n_heads, n_kv, hd, scale);  // warm-up
      check(cudaDeviceSynchronize(), "sync");
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) be->attention(0, q, out, n_heads, n_kv, hd, scale);
      check(cudaDeviceSynchronize(), "sync");
      const double ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      const double flops = 4.0 * hd * n_heads * (double(P) * (P + 1) / 2);
      const double tflops = flops / (ms * 1e-3) / 1e12;
      std::printf("attention prefill %5d tokens, %s: %.3f ms, %.1f TFLOP/s = %.0f%% of the bf16 peak\n", P,
                  prefill_attention_name(kind), ms, tflops, 100.0 * tflops / peak);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
}
