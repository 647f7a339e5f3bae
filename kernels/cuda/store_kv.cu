// Store K/V: writes the step's K and V rows (F32, n_kv_heads*head_dim each) into their paged
// slots of one layer's cache, each half in its element type (kv_elem.cuh: F16 round to nearest
// even, F32 as is, Q8_0 a group of values per unit with its f16 scale). Negative slots are
// skipped (padding).
// Launch: grid (n), 256 threads striding over the n_kv_heads * units-per-head storage units
// of one token's K, then of its V (a unit: one value, or one Q8_0 group; K and V may have
// different units when their types differ).
// Assumptions: slots are within the pool (validated by the host when the plan is uploaded);
// for Q8_0, head_dim is a multiple of 8 (checked by the backend).
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

// One token's row x (n_kv_heads * head_dim values) into slot `slot` of `pool` of type t, by the
// block's threads.
__device__ __forceinline__ void store_half(const float* x, void* pool, GgmlType t, int32_t slot,
                                           const PagedKv& kv) {
  const int hd = kv.head_dim, units = kv_units_per_head(t, hd);
  for (int i = threadIdx.x; i < kv.n_kv_heads * units; i += blockDim.x) {
    const int h = i / units, u = i % units;
    const int64_t head_row = (int64_t)slot * kv.n_kv_heads + h;
    kv_store_unit(kv_head(pool, t, head_row, hd), t, hd, u, x + (int64_t)h * hd);
  }
}

__global__ void store_kv_kernel(const float* k, const float* v, const int32_t* slots, PagedKv kv) {
  const int32_t slot = slots[blockIdx.x];
  if (slot < 0) return;
  const int64_t kv_dim = (int64_t)kv.n_kv_heads * kv.head_dim;
  store_half(k + (int64_t)blockIdx.x * kv_dim, kv.k, kv.k_type, slot, kv);
  store_half(v + (int64_t)blockIdx.x * kv_dim, kv.v, kv.v_type, slot, kv);
}

}  // namespace

void store_kv(const float* k, const float* v, const int32_t* slots, int64_t n, const PagedKv& kv,
              void* stream) {
  if (n <= 0) return;
  store_kv_kernel<<<static_cast<unsigned>(n), 256, 0, as_stream(stream)>>>(k, v, slots, kv);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
