// Conversion to F32: n elements of F32, F16 or BF16 to F32 (1-D weights: norms and biases,
// which the element-wise kernels read as F32).
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
// Assumptions: src and dst do not overlap.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void to_f32_kernel(const void* src, int type_id, int64_t n, float* dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = load_as_float(src, type_id, i);
}

}  // namespace

void convert_to_f32(const void* src, GgmlType src_type, int64_t n, float* dst, void* stream) {
  if (src_type != GgmlType::F32 && src_type != GgmlType::F16 && src_type != GgmlType::BF16)
    throw CudaError("convert_to_f32: source must be F32, F16 or BF16");
  if (n <= 0) return;
  to_f32_kernel<<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(src, static_cast<int>(src_type),
                                                                 n, dst);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
