// The second pass of the LM head's fused greedy argmax (see gemv.cu's gemv_bf16_argmax):
//   out[i] = argmax_key_token(max over p < parts of keys[(rows[i] - row_base) * parts + p])
// for each draw i < n_draws: the lowest token id of the row's largest logit, 0 when none is
// finite (kernels/argmax_key.h has the rule and the CPU reference, argmax_by_keys).
// Launch: grid (n_draws), kThreads threads; thread t folds keys t, t + kThreads, ..., then a
// shared-memory tree takes the block's max. Unsigned max is order-independent: the token does
// not depend on how the GEMV split the vocabulary.
// Assumptions: parts >= 1; rows[i] - row_base is a row of keys.
#include <cstdint>

#include "kernels/argmax_key.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    argmax_pick_kernel(const uint64_t* keys, int parts, const int32_t* rows, int64_t row_base, int32_t* out) {
  __shared__ uint64_t best[kThreads];
  const int tid = threadIdx.x, i = blockIdx.x;
  const uint64_t* k = keys + (rows[i] - row_base) * parts;
  uint64_t b = 0;
  for (int p = tid; p < parts; p += kThreads) b = k[p] > b ? k[p] : b;
  best[tid] = b;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (tid < half && best[tid + half] > best[tid]) best[tid] = best[tid + half];
    __syncthreads();
  }
  if (tid == 0) out[i] = argmax_key_token(best[0]);
}

}  // namespace

void argmax_pick(const uint64_t* keys, int64_t parts, const int32_t* rows, int64_t row_base, int64_t n_draws,
                 int32_t* out, void* stream) {
  if (n_draws <= 0) return;
  argmax_pick_kernel<<<static_cast<unsigned>(n_draws), kThreads, 0, as_stream(stream)>>>(
      keys, static_cast<int>(parts), rows, row_base, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
