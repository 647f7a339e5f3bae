// RMSNorm: out[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * w[:], for i < n.
// Launch: grid (n), 256 threads per row; the sum of squares is a fixed-order block reduction,
// so a row's result never depends on the other rows (batch invariance).
// Assumptions: F32 rows of `cols` floats; w is F32 [cols]; out may alias x.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(const float* x, const float* w, float eps, float* out,
                                int64_t cols) {
  __shared__ float scratch[32];
  const float* row = x + (int64_t)blockIdx.x * cols;
  float* dst = out + (int64_t)blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += row[c] * row[c];
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(ss / (float)cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = row[c] * scale * w[c];
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, float* out, int64_t n, int64_t cols,
              void* stream) {
  if (n <= 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(n), kThreads, 0, as_stream(stream)>>>(x, w, eps, out,
                                                                                cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
