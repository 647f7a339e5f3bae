// Embedding lookup: out[t, :] = table[tokens[t], :] converted to F32, for t < n.
// Launch: grid (n), 256 threads striding over the `dim` columns of one row.
// Assumptions: table is F32, F16 or BF16, row-major [vocab x dim]; tokens outside [0, vocab)
// produce a zero row instead of reading out of bounds (the host validates tokens first).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

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

}  // namespace

void embed(const void* table, GgmlType table_type, int64_t vocab, int64_t dim,
           const int32_t* tokens, int64_t n, float* out, void* stream) {
  if (table_type != GgmlType::F32 && table_type != GgmlType::F16 && table_type != GgmlType::BF16)
    throw CudaError("embed: the table must be F32, F16 or BF16");
  if (n <= 0) return;
  embed_kernel<<<static_cast<unsigned>(n), 256, 0, as_stream(stream)>>>(
      table, static_cast<int>(table_type), vocab, dim, tokens, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
