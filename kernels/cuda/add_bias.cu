// Bias add: x[i, :] += bias[:] over n x cols F32 (qwen2's Q/K/V projection biases).
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
// Assumptions: x contiguous row-major; bias holds `cols` floats.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_bias_kernel(float* x, const float* bias, int64_t total, int64_t cols) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] += bias[i % cols];
}

}  // namespace

void add_bias(float* x, const float* bias, int64_t n, int64_t cols, void* stream) {
  const int64_t total = n * cols;
  if (total <= 0) return;
  add_bias_kernel<<<grid_for(total, kThreads), kThreads, 0, as_stream(stream)>>>(x, bias, total,
                                                                                 cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
