// Block copy: copies every slot of block src into block dst, K and V, all layers (for the
// partial block at the end of a shared prefix and for copy-on-write); slot copy: the same for
// single slots (speculative decoding's accepted tree nodes). Bit-exact, whatever the element
// type: a unit is moved as 2-byte halves (every layout is a whole number of them).
// Launch: grid (n_copies, n_layers, 2 = K/V), 256 threads striding over the unit's halves.
// Assumptions: no destination is also a source within the same call (copies run in parallel),
// and src != dst.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

// Copies unit pairs[2i] to unit pairs[2i+1], a unit being `unit_elems` halves (a block or a slot).
__global__ void unit_copy_kernel(uint16_t* k_base, uint16_t* v_base, int64_t layer_stride,
                                 int64_t unit_elems, const int32_t* pairs) {
  const int32_t src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
  uint16_t* pool = (blockIdx.z == 0 ? k_base : v_base) + blockIdx.y * layer_stride;
  const uint16_t* from = pool + src * unit_elems;
  uint16_t* to = pool + dst * unit_elems;
  for (int64_t i = threadIdx.x; i < unit_elems; i += blockDim.x) to[i] = from[i];
}

void unit_copy(const KvPools& pools, const int32_t* pairs, int n, int64_t unit_elems, void* stream) {
  if (n <= 0 || pools.n_layers <= 0) return;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(pools.n_layers), 2);
  unit_copy_kernel<<<grid, 256, 0, as_stream(stream)>>>(
      static_cast<uint16_t*>(pools.k_base), static_cast<uint16_t*>(pools.v_base),
      pools.layer_stride, unit_elems, pairs);
  CUDA_CHECK_LAUNCH();
}

// One slot (all KV heads of one token, one layer) in 2-byte halves.
int64_t slot_halves(const KvPools& pools) {
  return (int64_t)pools.n_kv_heads * kv_head_bytes(pools.type, pools.head_dim) / 2;
}

}  // namespace

void block_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream) {
  unit_copy(pools, pairs, n, (int64_t)pools.block_size * slot_halves(pools), stream);
}

void slot_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream) {
  unit_copy(pools, pairs, n, slot_halves(pools), stream);
}

}  // namespace pagoda::cuda
