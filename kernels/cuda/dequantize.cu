// Dequantization of the GGML block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_XS) to bf16: y[i] = the i-th value of the blocks at src, computed as
// quant_decode.cuh's decode32 does (the CPU reference's floats, kernels/cpu/quants*.cpp), then
// rounded to bf16 (nearest even). Used for the weights of the bf16 mode at load, for the
// bounded per-matrix scratch the quantized mode feeds cuBLAS from at larger batches, and for
// 1-row quantized weights.
// Launch: one thread per piece of 32 values (a whole 32-value block, or one eighth of a
// 256-value block), 256 threads per CUDA block, grid-stride.
// Assumptions: n is a multiple of the type's block size; src is 2-byte aligned.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda {
namespace {

template <class B>
__global__ void dequant_kernel(const uint8_t* src, int64_t n_pieces, __nv_bfloat16* y) {
  for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n_pieces;
       p += (int64_t)gridDim.x * blockDim.x) {
    float v[32];
    B::decode32(src + (p / B::kPieces) * B::kBytes, (int)(p % B::kPieces), v);
    for (int i = 0; i < 32; ++i) y[p * 32 + i] = __float2bfloat16_rn(v[i]);
  }
}

}  // namespace

bool is_device_quant_type(GgmlType type) {
  return quant::with_quant_type(type, [](auto) {});
}

void dequantize_to_bf16(const void* src, GgmlType src_type, int64_t n, void* dst, void* stream) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* y = static_cast<__nv_bfloat16*>(dst);
  cudaStream_t st = as_stream(stream);
  if (n <= 0) return;
  const bool known = quant::with_quant_type(src_type, [&](auto blk) {
    using B = decltype(blk);
    if (n % B::kElems) throw CudaError("dequantize: size not a multiple of the block");
    dequant_kernel<B><<<grid_for(n / 32, 256), 256, 0, st>>>(s, n / 32, y);
    CUDA_CHECK_LAUNCH();
  });
  if (!known)
    throw CudaError(std::string("dequantize: unsupported type ") + ggml_type_info(src_type).name);
}

}  // namespace pagoda::cuda
