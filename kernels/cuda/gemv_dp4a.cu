// Decode matmul from quantized weights with int8 activations (dp4a):
//   quantize_acts_q8: x F32 [n, cols] -> per row, int8 blocks of 32 with scale d = amax / 127,
//     q = nearest(x * (1 / d)) clamped to [-127, 127], and the sum of q per half block (16);
//     bit-identical to the CPU's quantize_activation_row (kernels/cpu/matmul.cpp).
//   gemv_quant_dp4a: out[i * ld_out + r] = sum over pieces of the integer dot products of W's
//     pieces (quant_int.cuh) with the row's q, scaled per piece, for i < n <= kQuantGemvMaxRows.
//   gemv_quant_dp4a_grouped: the same for mixture-of-experts, many (expert, n rows) groups in one
//     launch (block row y = group y), so a layer's experts with n gathered rows each cost one
//     launch rather than one per expert; gemv_quant_dp4a_grouped_dev reads the group count from
//     the device (routing done there, moe_route.cu) and launches the most there can be.
// Why: a decode step reads every weight once per step; the FMA kernel (gemv_quant.cu) then does
// 32 float FMAs per value and row, which at 4-8 rows becomes the limit rather than the weight
// stream. Here a piece costs 8 dp4a per row and half block plus 5 float operations, and x is 4x
// fewer bytes to read from cache. The CPU's int8 kernels use the same activation rounding, so
// the two backends sum the same integers and differ only in the rounding of the per-piece float
// terms (the test holds them to 2e-5 of the output's magnitude).
// Launch: quantize_acts_q8: one warp per 32-value block, 4 warps a CUDA block. gemv_quant_dp4a:
// one warp per weight row, kWarps a CUDA block; lane l takes pieces l, l + 32, ... (consecutive
// lanes read consecutive pieces of the row: coalesced, in bytes since GGUF blocks are only
// 2-byte aligned); a row's 32 int8 activations come as two 16-byte loads from L1/L2.
// Numerics and batch invariance: per (row, output) a fixed chain of fmaf in piece order, then
// warp_sum's fixed tree: the same bits whatever n and the other rows.
// gemv_quant_dp4a_argmax: the same products for a matmul whose only reader is greedy draws (the
// LM head), as gemv_bf16_argmax (gemv.cu) does for bf16: grid argmax_parts(rows) / kWarps
// blocks, each warp a grid-stride walk over rows keeping the largest ArgmaxKey per activation
// row, no output written; argmax_pick.cu picks the token. Same per-row code, so the same bits.
// Assumptions: cols a multiple of the type's block; the activation buffer from quantize_acts_q8
// with the same n and cols (layout Q8ActsLayout, 16-byte aligned); W 2-byte aligned.
// Not yet run on a GPU (the emulator runs it: tests/gpu/test_cuda_gemv_dp4a.cpp).
#include <cstdint>

#include "kernels/cuda/argmax_fold.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/gemv_quant_dispatch.cuh"
#include "kernels/cuda/quant_acts.cuh"
#include "kernels/cuda/quant_int.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;

__global__ void __launch_bounds__(128)
    quantize_acts_q8_kernel(const float* x, int64_t n_blocks, int64_t blocks_per_row, int64_t ld_x, Q8ActsOut o) {
  const int64_t blk = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (blk >= n_blocks) return;  // the whole warp
  const int64_t i = blk / blocks_per_row, b = blk % blocks_per_row;
  const int lane = threadIdx.x & 31;
  quantize_block_lane(o, blk, lane, x[i * ld_x + 32 * b + lane]);
}

// groups == nullptr: one group, matrix w, activation rows 0..N-1. Else block row y is group y:
// expert groups[2y] (its matrix at w + expert * rows * row_bytes), activation and output rows
// groups[2y + 1] + 0..N-1; with n_groups given, block rows from *n_groups on have no group.
// acc[i] = row wr of W times activation row first + i, lane `lane`'s share (before the warp sum).
template <class B, int N>
__device__ __forceinline__ void row_dot(const uint8_t* wr, int64_t first, const int8_t* q, const float* d,
                                        const int* qsum, int pieces, int lane, float* acc) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  for (int p = lane; p < pieces; p += 32) {
    quant::IntPiece wp;
    quant::IntDecode<B>::piece(wr + (int64_t)(p / B::kPieces) * B::kBytes, p % B::kPieces, wp);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t blk = (first + i) * pieces + p;
      const int4* qv = reinterpret_cast<const int4*>(q + blk * 32);
      const int4 a = qv[0], b = qv[1];
      int h0 = __dp4a(wp.w[0], a.x, 0);
      h0 = __dp4a(wp.w[1], a.y, h0);
      h0 = __dp4a(wp.w[2], a.z, h0);
      h0 = __dp4a(wp.w[3], a.w, h0);
      int h1 = __dp4a(wp.w[4], b.x, 0);
      h1 = __dp4a(wp.w[5], b.y, h1);
      h1 = __dp4a(wp.w[6], b.z, h1);
      h1 = __dp4a(wp.w[7], b.w, h1);
      float t = __fmul_rn(wp.scale[0], (float)h0);
      t = fmaf(wp.scale[1], (float)h1, t);
      t = fmaf(wp.offset[0], (float)qsum[2 * blk], t);
      t = fmaf(wp.offset[1], (float)qsum[2 * blk + 1], t);
      acc[i] = fmaf(d[blk], t, acc[i]);
    }
  }
}

// groups == nullptr: one group, matrix w, activation rows 0..N-1. Else block row y is group y:
// expert groups[2y] (its matrix at w + expert * rows * row_bytes), activation and output rows
// groups[2y + 1] + 0..N-1; with n_groups given, block rows from *n_groups on have no group.
template <class B, int N>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_dp4a_kernel(const uint8_t* w, const int* groups, const int* n_groups, const int8_t* q, const float* d,
                     const int* qsum, float* out, int rows, int pieces, int64_t row_bytes, int64_t ld_out) {
  if (n_groups && (int)blockIdx.y >= *n_groups) return;  // the whole block
  const int lane = threadIdx.x & 31;
  const int r = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp: the shuffles below see all 32 lanes
  int64_t first = 0;
  if (groups) {
    w += (int64_t)groups[2 * blockIdx.y] * rows * row_bytes;
    first = groups[2 * blockIdx.y + 1];
  }
  float acc[N];
  row_dot<B, N>(w + (int64_t)r * row_bytes, first, q, d, qsum, pieces, lane, acc);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float s = warp_sum(acc[i]);
    if (lane == 0) out[(first + i) * ld_out + r] = s;
  }
}

// The greedy form (one matrix, activation rows 0..N-1): warp g of the grid takes rows g, g +
// parts, ... (parts = the grid's warps), computes each as gemv_dp4a_kernel does (the same bits)
// and keeps the largest ArgmaxKey per activation row into keys[i * parts + g] (0: no row).
template <class B, int N>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_dp4a_argmax_kernel(const uint8_t* w, const int8_t* q, const float* d, const int* qsum, uint64_t* keys,
                            int rows, int pieces, int64_t row_bytes) {
  const int lane = threadIdx.x & 31;
  const int g = blockIdx.x * kWarps + (threadIdx.x >> 5), parts = gridDim.x * kWarps;
  warp_argmax_keys<N>(rows, g, parts, lane, keys, [&](int r, float (&acc)[N]) {
    row_dot<B, N>(w + (int64_t)r * row_bytes, 0, q, d, qsum, pieces, lane, acc);
  });
}

template <class B, int N>
void launch(const void* w, const int32_t* groups, int n_groups, const int32_t* n_groups_dev, const Q8ActsLayout& L,
            const void* acts, float* out,
            int64_t rows, int64_t cols, int64_t ld_out, cudaStream_t st) {
  const auto* base = static_cast<const uint8_t*>(acts);
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>(n_groups));
  gemv_dp4a_kernel<B, N><<<grid, kWarps * 32, 0, st>>>(
      static_cast<const uint8_t*>(w), groups, n_groups_dev, reinterpret_cast<const int8_t*>(base + L.q_offset),
      reinterpret_cast<const float*>(base + L.d_offset), reinterpret_cast<const int*>(base + L.sum_offset), out,
      static_cast<int>(rows), static_cast<int>(cols / 32), cols / B::kElems * B::kBytes, ld_out);
  CUDA_CHECK_LAUNCH();
}

template <class B, int N>
void launch_argmax(const void* w, const Q8ActsLayout& L, const void* acts, uint64_t* keys, int64_t rows, int64_t cols,
                   cudaStream_t st) {
  static_assert(kWarps == 4, "argmax_parts counts warps of 4-warp blocks");
  const auto* base = static_cast<const uint8_t*>(acts);
  const unsigned blocks = static_cast<unsigned>(argmax_parts(rows) / kWarps);
  gemv_dp4a_argmax_kernel<B, N><<<blocks, kWarps * 32, 0, st>>>(
      static_cast<const uint8_t*>(w), reinterpret_cast<const int8_t*>(base + L.q_offset),
      reinterpret_cast<const float*>(base + L.d_offset), reinterpret_cast<const int*>(base + L.sum_offset), keys,
      static_cast<int>(rows), static_cast<int>(cols / 32), cols / B::kElems * B::kBytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

Q8ActsLayout q8_acts_layout(int64_t n, int64_t cols) {
  Q8ActsLayout L;
  const int64_t blocks = n * (cols / 32);
  L.q_offset = 0;
  L.d_offset = static_cast<size_t>(blocks * 32);  // a multiple of 32 bytes
  L.sum_offset = L.d_offset + static_cast<size_t>(blocks) * 4;
  L.bytes = L.sum_offset + static_cast<size_t>(blocks) * 8;
  return L;
}

void quantize_acts_q8(const float* x, int64_t n, int64_t cols, int64_t ld_x, void* acts, void* stream) {
  const Q8ActsLayout L = q8_acts_layout(n, cols);
  const int64_t blocks = n * (cols / 32);
  if (blocks <= 0) return;
  auto* base = static_cast<uint8_t*>(acts);
  Q8ActsOut o;
  o.q = reinterpret_cast<int8_t*>(base + L.q_offset);
  o.d = reinterpret_cast<float*>(base + L.d_offset);
  o.qsum = reinterpret_cast<int*>(base + L.sum_offset);
  quantize_acts_q8_kernel<<<static_cast<unsigned>((blocks + 3) / 4), 128, 0, as_stream(stream)>>>(
      x, blocks, cols / 32, ld_x, o);
  CUDA_CHECK_LAUNCH();
}

namespace {

bool dp4a_launch(const void* w, GgmlType type, const int32_t* groups, int n_groups, const int32_t* n_groups_dev,
                 const void* acts,
                 int64_t acts_rows, float* out, int64_t n, int64_t rows, int64_t cols, int64_t ld_out, void* stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(acts) & 15) == 0 && (reinterpret_cast<uintptr_t>(w) & 1) == 0;
  if (!aligned || n_groups < 1 || n_groups > 65535) return false;
  const Q8ActsLayout L = q8_acts_layout(acts_rows, cols);
  cudaStream_t st = as_stream(stream);
  return with_quant_gemv(type, n, rows, cols, [&](auto blk, auto rows_n) {
    launch<decltype(blk), decltype(rows_n)::value>(w, groups, n_groups, n_groups_dev, L, acts, out, rows, cols, ld_out, st);
  });
}

}  // namespace

bool gemv_quant_dp4a_argmax(const void* w, GgmlType type, const void* acts, uint64_t* keys, int64_t n, int64_t rows,
                            int64_t cols, void* stream) {
  const bool aligned = (reinterpret_cast<uintptr_t>(acts) & 15) == 0 && (reinterpret_cast<uintptr_t>(w) & 1) == 0;
  if (!aligned) return false;
  const Q8ActsLayout L = q8_acts_layout(n, cols);
  return with_quant_gemv(type, n, rows, cols, [&](auto blk, auto rows_n) {
    launch_argmax<decltype(blk), decltype(rows_n)::value>(w, L, acts, keys, rows, cols, as_stream(stream));
  });
}

bool gemv_quant_dp4a(const void* w, GgmlType type, const void* acts, float* out, int64_t n, int64_t rows,
                     int64_t cols, int64_t ld_out, void* stream) {
  return dp4a_launch(w, type, nullptr, 1, nullptr, acts, n, out, n, rows, cols, ld_out, stream);
}

bool gemv_quant_dp4a_grouped(const void* w, GgmlType type, const int32_t* groups, int n_groups, const void* acts,
                             int64_t acts_rows, float* out, int64_t n, int64_t rows, int64_t cols, int64_t ld_out,
                             void* stream) {
  return dp4a_launch(w, type, groups, n_groups, nullptr, acts, acts_rows, out, n, rows, cols, ld_out, stream);
}

bool gemv_quant_dp4a_grouped_dev(const void* w, GgmlType type, const int32_t* groups, int max_groups,
                                 const int32_t* n_groups, const void* acts, int64_t acts_rows, float* out, int64_t n,
                                 int64_t rows, int64_t cols, int64_t ld_out, void* stream) {
  return dp4a_launch(w, type, groups, max_groups, n_groups, acts, acts_rows, out, n, rows, cols, ld_out, stream);
}

}  // namespace pagoda::cuda
