// Tensor-core GEMM straight from quantized weights (the GGUF blocks as uploaded, no bf16 copy
// of the matrix anywhere):
//   out[i * ld_out + r] = sum_k bf16(x[i * ld_x + k]) * bf16(W[r, k])   for i < n, r < rows,
// W [rows, cols] in one of quant_decode.cuh's block types (its values exactly as the CPU
// reference decodes them, then rounded to bf16 as dequantize_to_bf16 rounds them), x F32
// [n, cols] rounded to bf16 on the way into shared memory, products summed in f32 by
// mma.sync m16n8k16 (kernels/cuda/mma.cuh). The same numbers as dequantizing the matrix into a
// bf16 scratch and running a bf16 cuBLAS GEMM (the path it replaces for more than
// kQuantGemvMaxRows rows), up to the order of the f32 sums. CPU reference: the CPU backend's
// matmul (tests/gpu/test_cuda_quant.cpp compares against it and against the bf16-rounded
// products).
// Launch: grid (ceil(rows / 128), ceil(n / 64)), 128 threads (4 warps). A CUDA block owns a
// 128-row x 64-token tile of out and walks k in steps of 64: each thread decodes one weight
// row's two 32-value pieces (decode32) into the shared W tile as bf16, the block converts the
// 64 x 64 x tile to bf16 (eight float4 loads a thread), then each warp multiplies its 64-row x
// 32-token quarter: per 16 of k, four ldmatrix.x4 for A (W), two for B (x), 16 MMAs into 64 f32
// accumulators a thread. Shared rows are padded to 72 values (144 bytes), so the eight row
// addresses of an ldmatrix fall in distinct banks. Rows, tokens and k past the ends are
// zero-filled in shared memory and never stored.
// Registers (ptxas -v, CUDA 13, sm_90, -O3): 167-168 for every type, no spills, no stack;
// 27,648 bytes of static shared memory: 3 CUDA blocks (12 warps) an SM at most.
// Not yet tuned: no double buffering (a k step's loads and decodes wait for the previous step's
// MMAs), a warp's 32 lanes decode 32 different rows (uncoalesced 1-2 byte loads, as every
// decode of these 2-byte-aligned blocks), 64-token tiles even for n = 9. Unmeasured on a GPU.
// Assumptions: cols a multiple of the type's block (so of 32); W 2-byte aligned; x 4-byte
// aligned (float4 loads when x is 16-byte aligned and ld_x % 4 == 0, scalar loads otherwise);
// rows, n and cols / 32 within int range.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kTileRows = 128, kTileTokens = 64, kTileK = 64;
constexpr int kLd = kTileK + 8;  // bf16 per shared row: 144 bytes, ldmatrix conflict-free
constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

template <class B>
__global__ void __launch_bounds__(kThreads)
    gemm_quant_mma_kernel(const uint8_t* w, const float* x, float* out, int rows, int n, int pieces,
                          int64_t row_bytes, int64_t ld_x, int64_t ld_out, bool x_vec4) {
  __shared__ __align__(16) uint16_t sw[kTileRows * kLd];
  __shared__ __align__(16) uint16_t sx[kTileTokens * kLd];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int m0 = blockIdx.x * kTileRows, n0 = blockIdx.y * kTileTokens;
  const int wm = (warp >> 1) * 64, wn = (warp & 1) * 32;  // this warp's rows and tokens
  float acc[4][4][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
  const int64_t k_end = (int64_t)pieces * 32;
  for (int p0 = 0; p0 < pieces; p0 += kTileK / 32) {
    // W: row m0 + tid, pieces p0 and p0 + 1, as 2 x 4 16-byte stores.
    const int r = m0 + tid;
#pragma unroll
    for (int j = 0; j < kTileK / 32; ++j) {
      const int p = p0 + j;
      uint4* dst = reinterpret_cast<uint4*>(sw + tid * kLd + j * 32);
      if (r < rows && p < pieces) {
        float v[32];
        B::decode32(w + (int64_t)r * row_bytes + (int64_t)(p / B::kPieces) * B::kBytes, p % B::kPieces, v);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          dst[q] = make_uint4(pack_bf16x2(v[8 * q], v[8 * q + 1]), pack_bf16x2(v[8 * q + 2], v[8 * q + 3]),
                              pack_bf16x2(v[8 * q + 4], v[8 * q + 5]), pack_bf16x2(v[8 * q + 6], v[8 * q + 7]));
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_uint4(0, 0, 0, 0);
      }
    }
    // x: 64 tokens x 64 values = 1,024 groups of four, eight a thread.
#pragma unroll
    for (int j = 0; j < kTileTokens * kTileK / 4 / kThreads; ++j) {
      const int idx = j * kThreads + tid, t = idx / (kTileK / 4), k4 = (idx % (kTileK / 4)) * 4;
      const int i = n0 + t;
      const int64_t k = (int64_t)p0 * 32 + k4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < n && k < k_end) {
        const float* src = x + (int64_t)i * ld_x + k;
        if (x_vec4) v = *reinterpret_cast<const float4*>(src);
        else v = make_float4(src[0], src[1], src[2], src[3]);
      }
      *reinterpret_cast<uint2*>(sx + t * kLd + k4) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      uint32_t a[4][4], b[4][2];
      // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
      // of each 16-row slice: lane l addresses row l % 16, k (l / 16) * 8.
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        ldmatrix_x4(a[mi], sw + (wm + mi * 16 + (lane & 15)) * kLd + kk + (lane >> 4) * 8);
      // B: per 16 tokens, matrices (tokens 0-7, k 0-7), (0-7, k 8-15), (8-15, k 0-7), (8-15,
      // k 8-15): the b[0], b[1] of two 8-token MMAs.
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t q[4];
        ldmatrix_x4(q, sx + (wn + nj * 16 + (lane >> 4) * 8 + (lane & 7)) * kLd + kk + ((lane >> 3) & 1) * 8);
        b[2 * nj][0] = q[0];
        b[2 * nj][1] = q[1];
        b[2 * nj + 1][0] = q[2];
        b[2 * nj + 1][1] = q[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_bf16_m16n8k16(acc[mi][ni], a[mi], b[ni]);
    }
    __syncthreads();  // the tiles are rewritten next step
  }
  // D fragment: element e of (mi, ni) is row g + 8 (e / 2), token 2 (lane % 4) + e % 2.
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm + mi * 16 + (lane >> 2) + 8 * (e >> 1);
        const int tok = n0 + wn + ni * 8 + 2 * (lane & 3) + (e & 1);
        if (row < rows && tok < n) out[(int64_t)tok * ld_out + row] = acc[mi][ni][e];
      }
}

}  // namespace

bool gemm_quant_mma(const void* w, GgmlType type, const float* x, float* out, int64_t n, int64_t rows,
                    int64_t cols, int64_t ld_x, int64_t ld_out, void* stream) {
  const int64_t kMax = int64_t(1) << 30;
  if (n < 1 || rows < 1 || cols < 1 || n > kMax || rows > kMax || cols / 32 > kMax) return false;
  if ((reinterpret_cast<uintptr_t>(w) & 1) != 0 || (reinterpret_cast<uintptr_t>(x) & 3) != 0) return false;
  const bool x_vec4 = (reinterpret_cast<uintptr_t>(x) & 15) == 0 && ld_x % 4 == 0;
  if (ceil_div(n, kTileTokens) > 65535) return false;
  cudaStream_t st = as_stream(stream);
  bool ok = false;
  quant::with_quant_type(type, [&](auto blk) {
    using B = decltype(blk);
    if (cols % B::kElems != 0) return;
    ok = true;
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTileRows)), static_cast<unsigned>(ceil_div(n, kTileTokens)));
    gemm_quant_mma_kernel<B><<<grid, kThreads, 0, st>>>(
        static_cast<const uint8_t*>(w), x, out, static_cast<int>(rows), static_cast<int>(n),
        static_cast<int>(cols / 32), cols / B::kElems * B::kBytes, ld_x, ld_out, x_vec4);
    CUDA_CHECK_LAUNCH();
  });
  return ok;
}

}  // namespace pagoda::cuda
