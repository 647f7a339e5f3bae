// GeGLU gate (gemma): out = gelu_tanh(gate) * up elementwise, gelu_tanh(g) = 0.5 g (1 +
// tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
// Assumptions: n x cols contiguous F32; out may alias gate or up (each element is read before
// it is written by the same thread).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gelu_mul_kernel(const float* gate, const float* up, float* out, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * up[i];
  }
}

}  // namespace

void gelu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols, void* stream) {
  const int64_t total = n * cols;
  if (total <= 0) return;
  gelu_mul_kernel<<<grid_for(total, kThreads), kThreads, 0, as_stream(stream)>>>(gate, up, out, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
