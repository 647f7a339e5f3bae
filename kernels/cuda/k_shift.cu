// K-shift (context shift): re-ropes in place the cached K of whole blocks by a position delta,
// i.e. multiplies each rotated pair by the rotation for delta * freq_scale * theta_i (theta_i
// divided by freq_factors[i] when given, exactly as rope.cu does), so that a
// token moved from logical index i to i + delta reads as if it had been roped at i + delta.
// V is untouched, whatever its type: only K's element type (KvPools::k_type) matters here.
// F16: read, rotate in F32, write F16 (one rounding, as on the CPU backend).
// F32 and Q8_0 (k_shift_rows_kernel): a thread takes a whole head row, dequantizes it, rotates
// it and stores it again (Q8_0 re-quantized group by group, as the CPU backend does).
// Launch: grid (n_shifts, n_layers), 256 threads striding over block_size * n_kv_heads * n_rot/2
// pairs (F16) or block_size * n_kv_heads head rows (F32, Q8_0) of one block of one layer.
// Assumptions: the listed blocks are distinct (each pair is rotated by exactly one thread).
#include <cuda_fp16.h>

#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_common.cuh"

namespace pagoda::cuda {
namespace {

__global__ void k_shift_kernel(__half* k_base, int64_t layer_stride, int block_size,
                               int n_kv_heads, int head_dim, const int32_t* shifts, int n_rot,
                               float freq_base, float freq_scale, bool neox,
                               const float* freq_factors) {
  const int32_t block = shifts[2 * blockIdx.x];
  const double delta = (double)shifts[2 * blockIdx.x + 1];
  const int64_t block_elems = (int64_t)block_size * n_kv_heads * head_dim;
  __half* base = k_base + blockIdx.y * layer_stride + block * block_elems;
  const int half = n_rot / 2;
  const int pairs = block_size * n_kv_heads * half;
  for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
    const int head_row = j / half, i = j % half;  // head_row = slot * n_kv_heads + head
    int a, b;
    rope_pair(i, n_rot, neox, &a, &b);
    __half* head = base + (int64_t)head_row * head_dim;
    float x0 = __half2float(head[a]), x1 = __half2float(head[b]);
    float c, s;
    rope_cos_sin(delta, i, n_rot, freq_base, freq_scale, freq_factors, &c, &s);
    rotate(c, s, &x0, &x1);
    head[a] = __float2half_rn(x0);
    head[b] = __float2half_rn(x1);
  }
}

__global__ void k_shift_rows_kernel(uint8_t* k_base, int64_t layer_bytes, KvPools pools,
                                    const int32_t* shifts, int n_rot, float freq_base,
                                    float freq_scale, bool neox, const float* freq_factors) {
  const int32_t block = shifts[2 * blockIdx.x];
  const double delta = (double)shifts[2 * blockIdx.x + 1];
  const int hd = pools.head_dim, rows = pools.block_size * pools.n_kv_heads;
  const GgmlType t = pools.k_type;
  uint8_t* layer = k_base + blockIdx.y * layer_bytes;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    uint8_t* head = kv_head(layer, t, (int64_t)block * rows + r, hd);
    float x[kMaxHeadDim];
    for (int d = 0; d < hd; ++d) x[d] = kv_value(head, t, hd, d);
    for (int i = 0; i < n_rot / 2; ++i) {
      int a, b;
      rope_pair(i, n_rot, neox, &a, &b);
      float c, s;
      rope_cos_sin(delta, i, n_rot, freq_base, freq_scale, freq_factors, &c, &s);
      rotate(c, s, &x[a], &x[b]);
    }
    for (int u = 0; u < kv_units_per_head(t, hd); ++u) kv_store_unit(head, t, hd, u, x);
  }
}

}  // namespace

void k_shift(const KvPools& pools, const int32_t* shifts, int n, int n_rot, float freq_base,
             float freq_scale, bool neox, void* stream, const float* freq_factors) {
  if (n_rot % 2 != 0 || n_rot > pools.head_dim || n_rot <= 0)
    throw CudaError("k_shift: n_rot must be even and within head_dim");
  if (n <= 0 || pools.n_layers <= 0) return;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(pools.n_layers));
  if (pools.k_type != GgmlType::F16) {
    k_shift_rows_kernel<<<grid, 256, 0, as_stream(stream)>>>(
        static_cast<uint8_t*>(pools.k_base), pools.k_layer_stride * 2, pools, shifts, n_rot,
        freq_base, freq_scale, neox, freq_factors);
    CUDA_CHECK_LAUNCH();
    return;
  }
  k_shift_kernel<<<grid, 256, 0, as_stream(stream)>>>(
      static_cast<__half*>(pools.k_base), pools.k_layer_stride, pools.block_size, pools.n_kv_heads,
      pools.head_dim, shifts, n_rot, freq_base, freq_scale, neox, freq_factors);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
