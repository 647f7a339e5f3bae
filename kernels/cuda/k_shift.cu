// K-shift (context shift): re-ropes in place the cached K of whole blocks by a position delta,
// i.e. multiplies each rotated pair by the rotation for delta * freq_scale * theta_i (theta_i
// divided by freq_factors[i] when given, exactly as rope.cu does), so that a
// token moved from logical index i to i + delta reads as if it had been roped at i + delta.
// V is untouched. Read F16, rotate in F32, write F16 (one rounding, as on the CPU backend).
// Launch: grid (n_shifts, n_layers), 256 threads striding over block_size * n_kv_heads * n_rot/2
// pairs of one block of one layer.
// Assumptions: the listed blocks are distinct (each pair is rotated by exactly one thread).
#include <cuda_fp16.h>

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

}  // namespace

void k_shift(const KvPools& pools, const int32_t* shifts, int n, int n_rot, float freq_base,
             float freq_scale, bool neox, void* stream, const float* freq_factors) {
  if (n_rot % 2 != 0 || n_rot > pools.head_dim || n_rot <= 0)
    throw CudaError("k_shift: n_rot must be even and within head_dim");
  if (n <= 0 || pools.n_layers <= 0) return;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(pools.n_layers));
  k_shift_kernel<<<grid, 256, 0, as_stream(stream)>>>(
      static_cast<__half*>(pools.k_base), pools.layer_stride, pools.block_size, pools.n_kv_heads,
      pools.head_dim, shifts, n_rot, freq_base, freq_scale, neox, freq_factors);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
