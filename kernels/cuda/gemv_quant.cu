// Decode matmul straight from quantized weights (the GGUF blocks as uploaded, no bf16 copy):
//   out[i * ld_out + r] = sum_k x[i, k] * W[r, k]   for i < n <= kQuantGemvMaxRows, r < rows,
// W [rows, cols] in one of quant_decode.cuh's block types, x F32 [n, cols] row-major, f32 out.
// Why: a decode step of a few sequences is one pass over the weights, and quantized weights are
// 2-4x fewer bytes than bf16 (a Q4_K matrix 0.56 bytes a value): each weight block is read once
// per step for all n rows, decoded in registers, and FMA'd against every row's activations.
// Launch: one warp per weight row, kQuantGemvWarps warps per CUDA block, grid ceil(rows / warps).
// Lane l takes the row's pieces of 32 values l, l + 32, ... (a piece is a 32-value block, or an
// eighth of a 256-value block), so the 32 lanes of a warp read consecutive blocks: one
// contiguous span of the row per loop trip (coalesced, though in 1-2 byte loads: GGUF blocks are
// only 2-byte aligned). x's 32 values per row come as eight float4 loads from L1/L2 (every warp
// reads the same x).
// Numerics and batch invariance: each value is decoded exactly as the CPU reference decodes it,
// each row's lane sum is a chain of fmaf over the lane's pieces in index order, then a fixed
// shuffle tree: a row's result is the same bits whatever n and the other rows are.
// Shapes: the backend sends n <= kQuantGemvMaxRows here; above that it dequantizes one matrix at
// a time into a bounded bf16 scratch for cuBLAS (backend_cuda_quant.cpp), because this kernel
// does n FMAs per decoded value and reads n x rows of 128 bytes per piece from cache, which
// outgrows the weight stream as n grows (where the crossover lies is not yet measured on a GPU).
// Registers (ptxas -v, CUDA 13, sm_90, -O3): 32-56 at n = 1, 72-90 at n = 8 depending on the
// type, no spills, no stack: the 32 decoded values stay in registers. Not yet run on a GPU.
// Assumptions: cols % 32 == 0 and a multiple of the block; x 16-byte aligned with ld_x % 4 == 0;
// W 2-byte aligned (gemv_quant returns false otherwise, launching nothing).
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/gemv_quant_dispatch.cuh"
#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kQuantGemvWarps = 4;

template <class B, int N>
__global__ void __launch_bounds__(kQuantGemvWarps * 32)
    gemv_quant_kernel(const uint8_t* w, const float* x, float* out, int rows, int pieces,
                      int64_t row_bytes, int64_t ld_x, int64_t ld_out) {
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kQuantGemvWarps + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp: the shuffles below see all 32 lanes
  const uint8_t* wr = w + (int64_t)r * row_bytes;
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  for (int p = lane; p < pieces; p += 32) {
    float v[32];
    B::decode32(wr + (int64_t)(p / B::kPieces) * B::kBytes, p % B::kPieces, v);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float4* xr = reinterpret_cast<const float4*>(x + i * ld_x + (int64_t)p * 32);
      float a = acc[i];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float4 xv = xr[q];
        a = fmaf(v[4 * q], xv.x, a);
        a = fmaf(v[4 * q + 1], xv.y, a);
        a = fmaf(v[4 * q + 2], xv.z, a);
        a = fmaf(v[4 * q + 3], xv.w, a);
      }
      acc[i] = a;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) out[(int64_t)i * ld_out + r] = s;
  }
}

template <class B, int N>
void launch(const void* w, const float* x, float* out, int64_t rows, int64_t cols, int64_t ld_x,
            int64_t ld_out, cudaStream_t st) {
  const unsigned blocks = static_cast<unsigned>((rows + kQuantGemvWarps - 1) / kQuantGemvWarps);
  const int64_t row_bytes = cols / B::kElems * B::kBytes;
  gemv_quant_kernel<B, N><<<blocks, kQuantGemvWarps * 32, 0, st>>>(
      static_cast<const uint8_t*>(w), x, out, static_cast<int>(rows), static_cast<int>(cols / 32),
      row_bytes, ld_x, ld_out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gemv_quant(const void* w, GgmlType type, const float* x, float* out, int64_t n, int64_t rows,
                int64_t cols, int64_t ld_x, int64_t ld_out, void* stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && ld_x % 4 == 0 &&
                       (reinterpret_cast<uintptr_t>(w) & 1) == 0;
  if (!aligned) return false;
  cudaStream_t st = as_stream(stream);
  return with_quant_gemv(type, n, rows, cols, [&](auto blk, auto rows_n) {
    launch<decltype(blk), decltype(rows_n)::value>(w, x, out, rows, cols, ld_x, ld_out, st);
  });
}

}  // namespace pagoda::cuda
