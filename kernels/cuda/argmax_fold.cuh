// The warp side of a GEMV whose epilogue is the greedy argmax (gemv.cu's bf16 GEMV and
// gemv_dp4a.cu's int8 one, fused into the LM head): warp g of `parts` walks rows g, g + parts,
// ..., and for each of the N activation rows keeps the largest argmax_key(logit, row) it saw
// (kernels/argmax_key.h); lane 0 then writes it to keys[i * parts + g], where argmax_pick.cu
// takes the maximum over the warps. The logits themselves are never stored.
// Assumes a whole warp calls it (warp_sum), and row_dot(r, acc) leaves row r's N per-lane
// partial sums in acc, exactly as the plain GEMV of the same file computes them, so the keys
// come from the same bits the unfused GEMV would write.
#pragma once

#include <cstdint>

#include "kernels/argmax_key.h"
#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {

template <int N, class RowDot>
__device__ __forceinline__ void warp_argmax_keys(int rows, int g, int parts, int lane, uint64_t* keys,
                                                 RowDot&& row_dot) {
  uint64_t best[N];
#pragma unroll
  for (int i = 0; i < N; ++i) best[i] = 0;
  for (int r = g; r < rows; r += parts) {
    float acc[N];
    row_dot(r, acc);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const uint64_t k = argmax_key(warp_sum(acc[i]), r);
      if (k > best[i]) best[i] = k;
    }
  }
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < N; ++i) keys[(int64_t)i * parts + g] = best[i];
}

}  // namespace pagoda::cuda
