// The int8 quantization of activations that the dp4a GEMV reads (q8_acts_layout), as one warp's
// device code: shared by quantize_acts_q8 (gemv_dp4a.cu) and the fused RMSNorm (rms_norm.cu), so
// both round every block the same way. Rule (the CPU's quantize_activation_row): a block of 32
// values has d = amax / 127, q = nearest(v * (1 / d)) clamped to [-127, 127], and the sums of q
// over its two halves of 16.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {

// The arrays of a q8_acts_layout buffer.
struct Q8ActsOut {
  int8_t* q = nullptr;  // 32 per block
  float* d = nullptr;   // 1 per block
  int* qsum = nullptr;  // 2 per block
};

// Called by all 32 lanes of a warp at once, lane l holding value l of block `blk`.
__device__ __forceinline__ void quantize_block_lane(const Q8ActsOut& o, int64_t blk, int lane, float v) {
  const float amax = warp_max(fabsf(v));
  const float db = __fdiv_rn(amax, 127.0f);
  const float id = db != 0.0f ? __frcp_rn(db) : 0.0f;
  const int qv = min(127, max(-127, __float2int_rn(__fmul_rn(v, id))));
  o.q[blk * 32 + lane] = (int8_t)qv;
  int s = qv;  // the sum over this lane's half (lanes 0-15 and 16-31)
  for (int off = 8; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) o.d[blk] = db;
  if ((lane & 15) == 0) o.qsum[2 * blk + lane / 16] = s;
}

}  // namespace pagoda::cuda
