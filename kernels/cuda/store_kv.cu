// Store K/V: writes the step's K and V rows (F32, n_kv_heads*head_dim each) into their paged
// slots of one layer's F16 cache (round to nearest even). Negative slots are skipped (padding).
// Launch: grid (n), 256 threads striding over the kv_dim entries of one token's K and V.
// Assumptions: slots are within the pool (validated by the host when the plan is uploaded).
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void store_kv_kernel(const float* k, const float* v, const int32_t* slots,
                                int64_t kv_dim, __half* k_cache, __half* v_cache) {
  const int32_t slot = slots[blockIdx.x];
  if (slot < 0) return;
  const float* ks = k + (int64_t)blockIdx.x * kv_dim;
  const float* vs = v + (int64_t)blockIdx.x * kv_dim;
  __half* kd = k_cache + (int64_t)slot * kv_dim;
  __half* vd = v_cache + (int64_t)slot * kv_dim;
  for (int64_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
    kd[c] = __float2half_rn(ks[c]);
    vd[c] = __float2half_rn(vs[c]);
  }
}

}  // namespace

void store_kv(const float* k, const float* v, const int32_t* slots, int64_t n, const PagedKv& kv,
              void* stream) {
  if (n <= 0) return;
  const int64_t kv_dim = (int64_t)kv.n_kv_heads * kv.head_dim;
  store_kv_kernel<<<static_cast<unsigned>(n), 256, 0, as_stream(stream)>>>(
      k, v, slots, kv_dim, static_cast<__half*>(kv.k), static_cast<__half*>(kv.v));
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
