// Block copy: copies every slot of block src into block dst, K and V, all layers (for the
// partial block at the end of a shared prefix and for copy-on-write); slot copy: the same for
// single slots (speculative decoding's accepted tree nodes). Bit-exact, whatever the element
// types: a unit is moved as 2-byte halves (every layout is a whole number of them); K's and
// V's units differ in size when their types do.
// Launch: grid (n_copies, n_layers, 2 = K/V), 256 threads striding over the unit's halves.
// Assumptions: no destination is also a source within the same call (copies run in parallel),
// and src != dst.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

// One half (K or V) of the cache for a copy: its base, layer stride and unit size, in halves.
struct CopyHalf {
  uint16_t* base;
  int64_t layer_stride;
  int64_t unit_elems;
};

// Copies unit pairs[2i] to unit pairs[2i+1] of half blockIdx.z (0: K, 1: V), a unit being a
// block or a slot of that half.
__global__ void unit_copy_kernel(CopyHalf k, CopyHalf v, const int32_t* pairs) {
  const int32_t src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
  const CopyHalf& h = blockIdx.z == 0 ? k : v;
  uint16_t* pool = h.base + blockIdx.y * h.layer_stride;
  const uint16_t* from = pool + src * h.unit_elems;
  uint16_t* to = pool + dst * h.unit_elems;
  for (int64_t i = threadIdx.x; i < h.unit_elems; i += blockDim.x) to[i] = from[i];
}

// One slot (all KV heads of one token, one layer) of a half of type t, in 2-byte halves.
int64_t slot_halves(const KvPools& pools, GgmlType t) {
  return (int64_t)pools.n_kv_heads * kv_head_bytes(t, pools.head_dim) / 2;
}

// slots_per_unit: block_size for block copies, 1 for slot copies.
void unit_copy(const KvPools& pools, const int32_t* pairs, int n, int64_t slots_per_unit, void* stream) {
  if (n <= 0 || pools.n_layers <= 0) return;
  const CopyHalf k{static_cast<uint16_t*>(pools.k_base), pools.k_layer_stride,
                   slots_per_unit * slot_halves(pools, pools.k_type)};
  const CopyHalf v{static_cast<uint16_t*>(pools.v_base), pools.v_layer_stride,
                   slots_per_unit * slot_halves(pools, pools.v_type)};
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(pools.n_layers), 2);
  unit_copy_kernel<<<grid, 256, 0, as_stream(stream)>>>(k, v, pairs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void block_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream) {
  unit_copy(pools, pairs, n, pools.block_size, stream);
}

void slot_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream) {
  unit_copy(pools, pairs, n, 1, stream);
}

}  // namespace pagoda::cuda
