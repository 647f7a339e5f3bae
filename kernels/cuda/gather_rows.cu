// Logits gather: out[j, :] = x[rows[j], :] for j < n_rows (the rows that need logits).
// Launch: grid (n_rows), 256 threads striding over the columns of one row.
// Assumptions: rows[j] indexes a valid row of x (the backend validates logit rows on upload).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t cols, float* out) {
  const float* src = x + (int64_t)rows[blockIdx.x] * cols;
  float* dst = out + (int64_t)blockIdx.x * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

}  // namespace

void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t cols, float* out,
                 void* stream) {
  if (n_rows <= 0 || cols <= 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n_rows), 256, 0, as_stream(stream)>>>(x, rows, cols,
                                                                                  out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
