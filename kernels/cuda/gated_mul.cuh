// The elementwise gated-activation kernel shared by silu_mul.cu and gelu_mul.cu:
// out[i] = Act::of(gate[i]) * up[i] over n x cols contiguous F32 values.
// Launch: 1-D grid-stride loop, kGatedThreads threads per block, grid capped at 65535 blocks.
// out may alias gate or up (each element is read before it is written by the same thread).
// Include after kernels/cuda/common.cuh.
#pragma once

namespace pagoda::cuda {

constexpr int kGatedThreads = 256;

template <class Act>
__global__ void gated_mul_kernel(const float* gate, const float* up, float* out, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = Act::of(gate[i]) * up[i];
}

template <class Act>
void launch_gated_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols, void* stream) {
  const int64_t total = n * cols;
  if (total <= 0) return;
  gated_mul_kernel<Act><<<grid_for(total, kGatedThreads), kGatedThreads, 0, as_stream(stream)>>>(gate, up, out, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
