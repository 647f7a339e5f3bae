// Small-batch matmul as matrix-vector products, for decode steps of a few sequences:
//   out[i * ld_out + r] = sum_k x[i, k] * W[r, k]   for i < n <= kGemvMaxRows, r < rows,
// W bf16 [rows, cols] row-major (the GEMM weights as upload_weight holds them), x bf16 [n, cols]
// (the activations rounded as the cuBLAS path rounds them), f32 accumulation and output.
// Why: cuBLAS's GEMM at n = 1 read llama3-8b's weights at ~1.4 TB/s of an H100's ~3 (first GPU
// run, 2026-11-26); a decode step of few sequences is one pass over the weights, so the kernel
// is a pure streaming read.
// Launch: one warp per weight row, kGemvWarps warps per block, grid ceil(rows / kGemvWarps).
// Lane l reads the row's 16-byte pieces l, l + 32, ..., four in flight per loop, adjacent lanes
// adjacent pieces (512 contiguous bytes per warp load); x's pieces come from L1/L2 (every warp
// reads the same x). The lane sums are added by a fixed shuffle tree: deterministic, and a row's
// result does not depend on the other rows of the batch.
// Assumptions: cols % 8 == 0, W and x 16-byte aligned (gemv_bf16 returns false otherwise, and
// the caller uses cuBLAS).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kGemvWarps = 4;

// acc[i] += dot of 8 bf16 weights (w) with x's 8 bf16 values of row i (xs[i]).
template <int N>
__device__ __forceinline__ void dot8(const uint4& w, const uint4* xs, float* acc) {
  const __nv_bfloat16* wv = reinterpret_cast<const __nv_bfloat16*>(&w);
  float wf[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) wf[e] = __bfloat162float(wv[e]);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const __nv_bfloat16* xv = reinterpret_cast<const __nv_bfloat16*>(&xs[i]);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i] += wf[e] * __bfloat162float(xv[e]);
  }
}

template <int N>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_bf16_kernel(const uint4* w, const uint4* x, float* out, int rows, int chunks, int ld_out) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const uint4* wr = w + (int64_t)r * chunks;
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  int c = lane;
  for (; c + 96 < chunks; c += 128) {
    uint4 wp[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) wp[u] = wr[c + 32 * u];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      uint4 xs[N];
#pragma unroll
      for (int i = 0; i < N; ++i) xs[i] = x[(int64_t)i * chunks + c + 32 * u];
      dot8<N>(wp[u], xs, acc);
    }
  }
  for (; c < chunks; c += 32) {
    uint4 xs[N];
#pragma unroll
    for (int i = 0; i < N; ++i) xs[i] = x[(int64_t)i * chunks + c];
    dot8<N>(wr[c], xs, acc);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) out[(int64_t)i * ld_out + r] = s;
  }
}

template <int N>
void launch(const void* w, const void* x, float* out, int64_t rows, int64_t cols, int64_t ld_out,
            cudaStream_t st) {
  const unsigned blocks = static_cast<unsigned>((rows + kGemvWarps - 1) / kGemvWarps);
  gemv_bf16_kernel<N><<<blocks, kGemvWarps * 32, 0, st>>>(static_cast<const uint4*>(w),
                                                          static_cast<const uint4*>(x), out,
                                                          static_cast<int>(rows),
                                                          static_cast<int>(cols / 8),
                                                          static_cast<int>(ld_out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gemv_bf16(const void* w, const void* x, float* out, int64_t n, int64_t rows, int64_t cols,
               int64_t ld_out, void* stream) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(x)) & 15) == 0;
  if (n < 1 || n > kGemvMaxRows || cols % 8 != 0 || !aligned || rows > (int64_t(1) << 30)) return false;
  cudaStream_t st = as_stream(stream);
  switch (n) {
    case 1: launch<1>(w, x, out, rows, cols, ld_out, st); break;
    case 2: launch<2>(w, x, out, rows, cols, ld_out, st); break;
    case 3: launch<3>(w, x, out, rows, cols, ld_out, st); break;
    default: launch<4>(w, x, out, rows, cols, ld_out, st); break;
  }
  return true;
}

}  // namespace pagoda::cuda
