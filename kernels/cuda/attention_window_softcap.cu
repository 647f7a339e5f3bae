// Paged attention with a sliding window and/or soft-capped scores (gemma2/gemma3/phi3 layers):
//   out[t, h] = softmax_j(cap(scale * q[t, h] . K[j, g])) V[j, g]
// over logical j in max(0, positions[t] + 1 - window) .. positions[t] (window 0: from 0), with
// cap(s) = softcap * tanh(s / softcap) when softcap > 0, g = h / (n_heads / n_kv_heads),
// for the tokens of prefill tiles (tiles[2i]: first token, tiles[2i+1]: count; decode rows go to
// attention_decode's split kernel with the same window and cap).
// Launch: grid (n_heads, n_tiles, kPrefillTileQ), 32 threads = one warp per (token, head). Lanes hold head
// dims lane, lane + 32, ... (head_dim <= kMaxHeadDim); each key's dot product is a warp
// reduction and the warp keeps an online softmax (max, sum, accumulator) over the keys in
// index order. Simple and exact rather than fast: one warp walks its row's whole window. A
// row's result depends on its own context only (batch invariance).
// Assumptions: head_dim <= kMaxHeadDim; n_heads a multiple of n_kv_heads; an F16, F32 or Q8_0
// cache (K/V values read through kv_elem.cuh). A token-tree row (speculative decoding) reads
// its ancestors' slots from AttnIndex::tree_slots (attention_warp.cuh's RowSlots); the window
// counts logical indices (positions), as on the CPU.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/attention_warp.cuh"

namespace pagoda::cuda {
namespace {

__global__ void attention_ext_kernel(const float* q, float* out, int n_heads, float scale, int window,
                                     float softcap, PagedKv kv, AttnIndex idx, const int32_t* tiles) {
  if ((int)blockIdx.z >= tiles[2 * blockIdx.y + 1]) return;  // past the tile's last token
  const int h = blockIdx.x, t = tiles[2 * blockIdx.y] + blockIdx.z, lane = threadIdx.x;
  const int hd = kv.head_dim;
  const int ctx = idx.positions[t] + 1;
  const int first = window > 0 ? max(0, ctx - window) : 0;
  const int g = h / (n_heads / kv.n_kv_heads);
  const RowSlots slot_of(idx, t, kv.block_size);
  WarpSoftmax sm(q + (int64_t)t * n_heads * hd + (int64_t)h * hd, hd, lane);
  for (int key = first; key < ctx; ++key) sm.add(kv, slot_of(key), g, scale, softcap, lane);
  float* oh = out + (int64_t)t * n_heads * hd + (int64_t)h * hd;
#pragma unroll
  for (int j = 0; j < kWarpAttnPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) oh[d] = sm.acc[j] / sm.l;
  }
}

}  // namespace

void attention_ext(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                   const PagedKv& kv, const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles,
                   void* stream) {
  if (n_tiles <= 0) return;
  if (n_tiles > 65535) throw CudaError("attention_ext: more than 65535 prefill tiles in one step");
  if (kv.head_dim > kMaxHeadDim || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    throw CudaError("attention_ext: head_dim above " + std::to_string(kMaxHeadDim) + " or a bad head layout");
  attention_ext_kernel<<<dim3(n_heads, (unsigned)n_tiles, kPrefillTileQ), 32, 0, as_stream(stream)>>>(
      q, out, n_heads, scale, window, softcap, kv, idx, tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
