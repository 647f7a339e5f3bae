// Embedding lookup: out[t, :] = table[tokens[t], :] converted to F32, for t < n.
// Launch: grid (n), 256 threads striding over the `dim` columns of one row (F32/F16/BF16), or
// over its pieces of 32 values (quantized tables: quant_decode.cuh decodes each piece).
// Assumptions: table is F32, F16, BF16 or a device quant type, row-major [vocab x dim]; tokens
// outside [0, vocab) produce a zero row instead of reading out of bounds (the host validates
// tokens first).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda {
namespace {

__global__ void embed_kernel(const void* table, int type_id, int64_t vocab, int64_t dim,
                             const int32_t* tokens, float* out) {
  const int32_t tok = tokens[blockIdx.x];
  float* dst = out + (int64_t)blockIdx.x * dim;
  const bool valid = tok >= 0 && tok < vocab;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
    dst[c] = valid ? load_as_float(table, type_id, (int64_t)tok * dim + c) : 0.0f;
}

template <class B>
__global__ void embed_quant_kernel(const uint8_t* table, int64_t vocab, int64_t dim,
                                   const int32_t* tokens, float* out) {
  const int32_t tok = tokens[blockIdx.x];
  float* dst = out + (int64_t)blockIdx.x * dim;
  const bool valid = tok >= 0 && tok < vocab;
  const uint8_t* row = table + (valid ? (int64_t)tok : 0) * (dim / B::kElems * B::kBytes);
  for (int64_t p = threadIdx.x; p < dim / 32; p += blockDim.x) {
    float v[32];
    B::decode32(row + (p / B::kPieces) * B::kBytes, (int)(p % B::kPieces), v);
    for (int i = 0; i < 32; ++i) dst[p * 32 + i] = valid ? v[i] : 0.0f;
  }
}

}  // namespace

void embed(const void* table, GgmlType table_type, int64_t vocab, int64_t dim,
           const int32_t* tokens, int64_t n, float* out, void* stream) {
  if (n <= 0) return;
  cudaStream_t st = as_stream(stream);
  const bool quantized = quant::with_quant_type(table_type, [&](auto blk) {
    using B = decltype(blk);
    if (dim % B::kElems) throw CudaError("embed: row length not a multiple of the block");
    embed_quant_kernel<B><<<static_cast<unsigned>(n), 256, 0, st>>>(
        static_cast<const uint8_t*>(table), vocab, dim, tokens, out);
  });
  if (!quantized) {
    if (table_type != GgmlType::F32 && table_type != GgmlType::F16 && table_type != GgmlType::BF16)
      throw CudaError("embed: the table must be F32, F16, BF16 or a quantized type");
    embed_kernel<<<static_cast<unsigned>(n), 256, 0, st>>>(table, static_cast<int>(table_type), vocab,
                                                          dim, tokens, out);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
