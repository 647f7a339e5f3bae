// Weight conversion to bf16: n elements of F32 or F16 (or BF16, copied) to bf16, round to
// nearest even. Used at load time for the GEMM weights (cuBLAS consumes bf16).
// Launch: 1-D grid-stride loop, 256 threads per block, grid capped at 65535 blocks.
// Assumptions: src and dst do not overlap.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void to_bf16_kernel(const void* src, int type_id, int64_t n, __nv_bfloat16* dst) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2bfloat16_rn(load_as_float(src, type_id, i));
}

}  // namespace

void convert_to_bf16(const void* src, GgmlType src_type, int64_t n, void* dst, void* stream) {
  if (src_type != GgmlType::F32 && src_type != GgmlType::F16 && src_type != GgmlType::BF16)
    throw CudaError("convert_to_bf16: source must be F32, F16 or BF16");
  if (n <= 0) return;
  to_bf16_kernel<<<grid_for(n, 256), 256, 0, as_stream(stream)>>>(
      src, static_cast<int>(src_type), n, static_cast<__nv_bfloat16*>(dst));
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
