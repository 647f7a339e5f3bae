// Scaling (gemma's embeddings times sqrt(dim)) and soft-capping (gemma2's final logits,
// x = cap * tanh(x / cap)), elementwise in place over n x cols F32.
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

// cap > 0: soft-cap; otherwise multiply by s.
__global__ void scale_kernel(float* x, float s, float cap, int64_t total) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] = cap > 0.0f ? cap * tanhf(x[i] * (1.0f / cap)) : x[i] * s;
}

void launch(float* x, float s, float cap, int64_t total, void* stream) {
  if (total <= 0) return;
  scale_kernel<<<grid_for(total, kThreads), kThreads, 0, as_stream(stream)>>>(x, s, cap, total);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void scale(float* x, float s, int64_t n, int64_t cols, void* stream) { launch(x, s, 0.0f, n * cols, stream); }

void softcap(float* x, float cap, int64_t n, int64_t cols, void* stream) {
  launch(x, 1.0f, cap, n * cols, stream);
}

}  // namespace pagoda::cuda
