// RoPE on fresh Q or K rows, in place: every head of x (n x n_heads*head_dim, F32) has its
// first n_rot dims rotated pairwise by positions[t] * freq_scale * freq_base^(-2i/n_rot)
// (divided by freq_factors[i] when given); dims n_rot..head_dim are untouched. Pairing: llama
// (2i, 2i+1) or NeoX halves (i, i+n_rot/2).
// Launch: grid (n, ceil(n_heads * n_rot/2 / 128)), 128 threads, one pair per thread: each pair's
// angle is computed in double (as the CPU does), dozens of instructions, so one block looping
// over a token's 2,048 pairs took 9-18 us on an H100 (a one-token step of llama3-8b).
// Assumptions: n_rot even and <= head_dim.
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_common.cuh"

namespace pagoda::cuda {
namespace {

__global__ void rope_kernel(float* x, const int32_t* positions, int n_heads, int head_dim,
                            int n_rot, float freq_base, float freq_scale, bool neox,
                            const float* freq_factors) {
  const int t = blockIdx.x;
  const double pos = (double)positions[t];
  const int half = n_rot / 2;
  float* row = x + (int64_t)t * n_heads * head_dim;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j < n_heads * half) {
    const int h = j / half, i = j % half;
    int a, b;
    rope_pair(i, n_rot, neox, &a, &b);
    float* head = row + (int64_t)h * head_dim;
    float c, s;
    rope_cos_sin(pos, i, n_rot, freq_base, freq_scale, freq_factors, &c, &s);
    rotate(c, s, &head[a], &head[b]);
  }
}

}  // namespace

void rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim, int n_rot,
          float freq_base, float freq_scale, bool neox, void* stream, const float* freq_factors) {
  if (n_rot % 2 != 0 || n_rot > head_dim || n_rot <= 0)
    throw CudaError("rope: n_rot must be even and within head_dim");
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(ceil_div(int64_t(n_heads) * (n_rot / 2), 128)));
  rope_kernel<<<grid, 128, 0, as_stream(stream)>>>(
      x, positions, n_heads, head_dim, n_rot, freq_base, freq_scale, neox, freq_factors);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
