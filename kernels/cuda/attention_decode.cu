// Paged attention for single-query rows (decode), split over the KV length:
//   out[t, h] = softmax_j(scale * q[t, h] . K[j, g]) V[j, g]  over logical j in 0..positions[t],
// with g = h / (n_heads / n_kv_heads) (GQA) and K/V rows found through the token's block table
// (logical j lives in block_table[j / block_size] at offset j % block_size; a token-tree row's
// logical indices from its sequence's n_past on come from its list in AttnIndex::tree_slots).
// Launch: attend kernel grid (n_heads, n_rows, n_splits), 128 threads = 4 warps. Heads run
// fastest so the query heads sharing a KV head read its K/V rows close together in time (L2
// hits instead of one HBM read per query head). Split s covers
// keys [s*kDecodeSplitKeys, (s+1)*kDecodeSplitKeys); within a split, warp w takes every 4th key;
// each lane holds head dims lane, lane+32, ... (head_dim <= kMaxHeadDim), a key's dot product
// is a warp reduction, and each warp keeps an online softmax (attention_warp.cuh). Warps are
// merged in shared memory. With one split the result is written directly; with more, partial
// (max, sum, acc) go to the workspace and a reduce kernel, grid (n_heads, n_rows) x 128 threads,
// merges them in split order. A row's own context fixes which splits are non-empty, and empty
// splits add exact zeros, so the result does not depend on the batch (batch invariance).
// Assumptions: max_ctx >= positions[t] + 1 for every row; head_dim <= kMaxHeadDim; n_heads a
// multiple of n_kv_heads; an F16, F32 or Q8_0 cache (K/V values read through kv_elem.cuh).
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/attention_warp.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;

__global__ void decode_attend_kernel(const float* q, float* out, int n_heads, float scale,
                                     PagedKv kv, AttnIndex idx, const int32_t* rows,
                                     float* ws_acc, float* ws_m, float* ws_l) {
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kMaxHeadDim];
  const int h = blockIdx.x, row = blockIdx.y, split = blockIdx.z, n_splits = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = kv.head_dim;
  const int t = rows[row];
  const int ctx = idx.positions[t] + 1;
  const int g = h / (n_heads / kv.n_kv_heads);
  const int begin = split * kDecodeSplitKeys;
  const int end = min(ctx, begin + kDecodeSplitKeys);
  const RowSlots slot_of(idx, t, kv.block_size);  // tree rows: their ancestors' slots
  WarpSoftmax sm(q + (int64_t)t * n_heads * hd + (int64_t)h * hd, hd, lane);
  for (int key = begin + warp; key < end; key += kWarps) sm.add(kv, slot_of(key), g, scale, 0.0f, lane);
  const float m = sm.m, l = sm.l;
  const float* acc = sm.acc;

  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kWarpAttnPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) sm_acc[warp][d] = acc[j];
  }
  __syncthreads();

  // Merge the warps (fixed order). Empty warps (m = -inf) weigh exactly 0.
  float mx = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w]);
  float wt[kWarps], total = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    wt[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - mx);
    total += wt[w] * sm_l[w];
  }
  const int64_t part = ((int64_t)row * n_heads + h) * n_splits + split;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kWarps; ++w) a += wt[w] * sm_acc[w][d];
    if (n_splits == 1)
      out[(int64_t)t * n_heads * hd + (int64_t)h * hd + d] = a / total;
    else
      ws_acc[part * hd + d] = a;
  }
  if (n_splits > 1 && threadIdx.x == 0) {
    ws_m[part] = mx;
    ws_l[part] = total;
  }
}

// Merges the splits of one (row, head), in split order. Split 0 is never empty (ctx >= 1).
__global__ void decode_reduce_kernel(float* out, int n_heads, int hd, int n_splits,
                                     const int32_t* rows, const float* ws_acc, const float* ws_m,
                                     const float* ws_l) {
  const int h = blockIdx.x, row = blockIdx.y;
  const int64_t first = ((int64_t)row * n_heads + h) * n_splits;
  float mx = -INFINITY;
  for (int s = 0; s < n_splits; ++s) mx = fmaxf(mx, ws_m[first + s]);
  float total = 0.0f;
  for (int s = 0; s < n_splits; ++s) {
    const float ms = ws_m[first + s];
    total += (ms == -INFINITY ? 0.0f : expf(ms - mx)) * ws_l[first + s];
  }
  const int t = rows[row];
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < n_splits; ++s) {
      const float ms = ws_m[first + s];
      a += (ms == -INFINITY ? 0.0f : expf(ms - mx)) * ws_acc[(first + s) * hd + d];
    }
    out[(int64_t)t * n_heads * hd + (int64_t)h * hd + d] = a / total;
  }
}

int splits_for(int max_ctx) {
  return static_cast<int>(ceil_div(max_ctx < 1 ? 1 : max_ctx, kDecodeSplitKeys));
}

}  // namespace

size_t attention_decode_workspace(int64_t n_rows, int n_heads, int head_dim, int max_ctx) {
  const int n_splits = splits_for(max_ctx);
  if (n_splits == 1) return 0;
  const size_t parts = static_cast<size_t>(n_rows) * n_heads * n_splits;
  return parts * (head_dim + 2);
}

void attention_decode(const float* q, float* out, int n_heads, float scale, const PagedKv& kv,
                      const AttnIndex& idx, const int32_t* rows, int64_t n_rows, int max_ctx,
                      float* workspace, void* stream) {
  if (kv.head_dim <= 0 || kv.head_dim > kMaxHeadDim)
    throw CudaError("attention_decode: head_dim must be in 1.." + std::to_string(kMaxHeadDim));
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    throw CudaError("attention_decode: n_heads must be a multiple of n_kv_heads");
  if (n_rows <= 0) return;
  const int n_splits = splits_for(max_ctx);
  if (n_splits > 1 && workspace == nullptr)
    throw CudaError("attention_decode: a workspace is needed for contexts over " +
                    std::to_string(kDecodeSplitKeys));
  const size_t parts = static_cast<size_t>(n_rows) * n_heads * n_splits;
  float* ws_acc = workspace;
  float* ws_m = workspace ? workspace + parts * kv.head_dim : nullptr;
  float* ws_l = ws_m ? ws_m + parts : nullptr;
  cudaStream_t st = as_stream(stream);
  if (n_rows > 65535) throw CudaError("attention_decode: more than 65535 decode rows in one step");
  dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_rows),
            static_cast<unsigned>(n_splits));
  decode_attend_kernel<<<grid, kWarps * 32, 0, st>>>(q, out, n_heads, scale, kv, idx, rows,
                                                    ws_acc, ws_m, ws_l);
  CUDA_CHECK_LAUNCH();
  if (n_splits > 1) {
    dim3 rgrid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_rows));
    decode_reduce_kernel<<<rgrid, 128, 0, st>>>(out, n_heads, kv.head_dim, n_splits, rows, ws_acc,
                                                ws_m, ws_l);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace pagoda::cuda
