// Block copy: copies every slot of block src into block dst, K and V, all layers (for the
// partial block at the end of a shared prefix and for copy-on-write). Bit-exact, whatever the
// element type: a block is moved as 2-byte units (every layout is a whole number of them).
// Launch: grid (n_copies, n_layers, 2 = K/V), 256 threads striding over the block's units.
// Assumptions: no destination block is also a source within the same call (copies run in
// parallel), and src != dst.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__global__ void block_copy_kernel(uint16_t* k_base, uint16_t* v_base, int64_t layer_stride,
                                  int64_t block_units, const int32_t* pairs) {
  const int32_t src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
  uint16_t* pool = (blockIdx.z == 0 ? k_base : v_base) + blockIdx.y * layer_stride;
  const uint16_t* from = pool + src * block_units;
  uint16_t* to = pool + dst * block_units;
  for (int64_t i = threadIdx.x; i < block_units; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void block_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream) {
  if (n <= 0 || pools.n_layers <= 0) return;
  const int64_t block_units =
      (int64_t)pools.block_size * pools.n_kv_heads * kv_head_bytes(pools.type, pools.head_dim) / 2;
  dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(pools.n_layers), 2);
  block_copy_kernel<<<grid, 256, 0, as_stream(stream)>>>(
      static_cast<uint16_t*>(pools.k_base), static_cast<uint16_t*>(pools.v_base),
      pools.layer_stride, block_units, pairs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
