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
// gemv_bf16_argmax: the same products for a matmul whose only reader is greedy draws (the LM
// head): nothing is written to out; each warp walks rows g, g + parts, ... (grid-stride, parts
// = argmax_parts(rows) warps in all) and keeps, per activation row, the largest ArgmaxKey
// (kernels/argmax_key.h) of the sums it made, into keys[i * parts + g]; argmax_pick.cu then
// reduces a row's parts to the token. A row's sum is made by the same code as gemv_bf16's, so
// the token is the one gemv_bf16 followed by sample.cu's greedy draw picks.
// Assumptions: cols % 8 == 0, W and x 16-byte aligned (gemv_bf16 returns false otherwise, and
// the caller uses cuBLAS).
// CPU reference: cpu matmul then the host sampler's argmax (tests/gpu/test_cuda_argmax.cpp).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/argmax_fold.cuh"
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

// acc[i] = row r of W times x's row i, lane `lane`'s share (before the warp sum).
template <int N>
__device__ __forceinline__ void row_dot(const uint4* wr, const uint4* x, int chunks, int lane, float* acc) {
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
}

template <int N>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_bf16_kernel(const uint4* w, const uint4* x, float* out, int rows, int chunks, int ld_out) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  float acc[N];
  row_dot<N>(w + (int64_t)r * chunks, x, chunks, lane, acc);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) out[(int64_t)i * ld_out + r] = s;
  }
}

// The greedy form: warp g of the grid takes rows g, g + parts, ... (parts = the grid's warps),
// computes each as gemv_bf16_kernel does (the same bits) and keeps the largest ArgmaxKey per
// activation row; keys[i * parts + g] gets it (0 when the warp had no row).
template <int N>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_bf16_argmax_kernel(const uint4* w, const uint4* x, uint64_t* keys, int rows, int chunks) {
  const int lane = threadIdx.x & 31;
  const int g = blockIdx.x * kGemvWarps + (threadIdx.x >> 5), parts = gridDim.x * kGemvWarps;
  warp_argmax_keys<N>(rows, g, parts, lane, keys,
                      [&](int r, float (&acc)[N]) { row_dot<N>(w + (int64_t)r * chunks, x, chunks, lane, acc); });
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

template <int N>
void launch_argmax(const void* w, const void* x, uint64_t* keys, int64_t rows, int64_t cols, cudaStream_t st) {
  static_assert(kGemvWarps == 4, "argmax_parts counts warps of 4-warp blocks");
  const unsigned blocks = static_cast<unsigned>(argmax_parts(rows) / kGemvWarps);
  gemv_bf16_argmax_kernel<N><<<blocks, kGemvWarps * 32, 0, st>>>(static_cast<const uint4*>(w),
                                                                 static_cast<const uint4*>(x), keys,
                                                                 static_cast<int>(rows), static_cast<int>(cols / 8));
  CUDA_CHECK_LAUNCH();
}

bool gemv_bf16_takes(const void* w, const void* x, int64_t n, int64_t rows, int64_t cols) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(x)) & 15) == 0;
  return n >= 1 && n <= kGemvMaxRows && cols % 8 == 0 && aligned && rows <= (int64_t(1) << 30);
}

}  // namespace

bool gemv_bf16(const void* w, const void* x, float* out, int64_t n, int64_t rows, int64_t cols,
               int64_t ld_out, void* stream) {
  if (!gemv_bf16_takes(w, x, n, rows, cols)) return false;
  cudaStream_t st = as_stream(stream);
  switch (n) {
    case 1: launch<1>(w, x, out, rows, cols, ld_out, st); break;
    case 2: launch<2>(w, x, out, rows, cols, ld_out, st); break;
    case 3: launch<3>(w, x, out, rows, cols, ld_out, st); break;
    default: launch<4>(w, x, out, rows, cols, ld_out, st); break;
  }
  return true;
}

bool gemv_bf16_argmax(const void* w, const void* x, uint64_t* keys, int64_t n, int64_t rows, int64_t cols,
                      void* stream) {
  if (!gemv_bf16_takes(w, x, n, rows, cols)) return false;
  cudaStream_t st = as_stream(stream);
  switch (n) {
    case 1: launch_argmax<1>(w, x, keys, rows, cols, st); break;
    case 2: launch_argmax<2>(w, x, keys, rows, cols, st); break;
    case 3: launch_argmax<3>(w, x, keys, rows, cols, st); break;
    default: launch_argmax<4>(w, x, keys, rows, cols, st); break;
  }
  return true;
}

}  // namespace pagoda::cuda
