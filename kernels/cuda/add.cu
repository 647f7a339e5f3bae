// Residual add: x[i, :] += y[i, :] over n x cols F32.
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
// Assumptions: x and y are contiguous row-major and do not overlap (x == y is fine).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(float* x, const float* y, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] += y[i];
}

}  // namespace

void add(float* x, const float* y, int64_t n, int64_t cols, void* stream) {
  const int64_t total = n * cols;
  if (total <= 0) return;
  add_kernel<<<grid_for(total, kThreads), kThreads, 0, as_stream(stream)>>>(x, y, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
