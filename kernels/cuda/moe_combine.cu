// Mixture-of-experts combine: out[i, :] = sum over j < k, in j order, of weights[i*k+j] *
// y[place[i*k+j], :], then + shared_weights[i] * shared[i, :] when `shared` is given (the same
// order as the CPU's cpu::moe_combine, so a token's sum depends on its own experts only).
// Launch: grid (n), 256 threads striding over the columns of one token.
// Assumptions: place[] indexes valid rows of y (built on the host by cpu::moe_group).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void moe_combine_kernel(const float* y, const int32_t* place, const float* weights, int k,
                                   const float* shared, const float* shared_weights, int64_t dim,
                                   float* out) {
  const int64_t i = blockIdx.x;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j)
      acc += weights[i * k + j] * y[(int64_t)place[i * k + j] * dim + c];
    if (shared != nullptr) acc += shared_weights[i] * shared[i * dim + c];
    out[i * dim + c] = acc;
  }
}

}  // namespace

void moe_combine(const float* y, const int32_t* place, const float* weights, int k, const float* shared,
                 const float* shared_weights, int64_t n, int64_t dim, float* out, void* stream) {
  if (n <= 0 || dim <= 0) return;
  moe_combine_kernel<<<static_cast<unsigned>(n), 256, 0, as_stream(stream)>>>(y, place, weights, k, shared,
                                                                              shared_weights, dim, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
