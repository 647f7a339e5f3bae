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
// With a sliding window (window > 0) a row reads logical keys from max(0, ctx - window) on: the
// splits stay the fixed ranges above, intersected with the window, so splits behind it are
// empty (they read nothing, and no hole of a released block is touched); with softcap > 0 each
// scaled score s becomes softcap * tanh(s / softcap) (gemma2/gemma3/phi3 decode rows).
// Assumptions: max_ctx >= positions[t] + 1 for every row; head_dim <= kMaxHeadDim; n_heads a
// multiple of n_kv_heads; an F16, F32 or Q8_0 cache (K/V values read through kv_elem.cuh).
//
// The grouped kernel (decode_gqa_kernel) replaces the one above whenever head_dim is a multiple
// of 8 and at most kMaxGqa query heads share a KV head (every common model): one block of 128
// threads per (KV head, row, split) serves all G query heads of its KV head, so each K/V row
// is read once, in 16-byte pieces. A split's keys go in tiles of 128: (1) scores, one key per
// thread, its K row read whole and dotted with the G query rows (in shared memory); (2) per head,
// one warp takes the tile's max and exponentials (online softmax, fixed order); (3) V: thread
// (kg, c) accumulates dims 8c..8c+7 of every KG-th key (KG = 128 / (head_dim / 8)), so a warp
// reads whole V rows; the KG partial sums are added in a fixed order at the end. It writes the
// same partials (max, sum, unnormalized acc) as the per-head kernel, so the reduce kernel and
// the batch-invariance argument are shared. The per-head kernel had one warp reduction per key
// and read K/V once per query head: on an H100, llama3-8b at 2,048-token contexts and batch 64
// spent ~75 ms of a 91 ms step in it.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/attention_warp.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kWarps = 4;

// The first logical key a row of context ctx attends to: ctx - window with a window, else 0.
__device__ __forceinline__ int window_first(int ctx, int window) { return window > 0 ? max(0, ctx - window) : 0; }

// A scaled score after soft-capping (softcap > 0), as WarpSoftmax::add applies it.
__device__ __forceinline__ float capped(float s, float softcap) {
  return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
}

__global__ void decode_attend_kernel(const float* q, float* out, int n_heads, float scale, int window,
                                     float softcap, PagedKv kv, AttnIndex idx, const int32_t* rows,
                                     float* ws_acc, float* ws_m, float* ws_l) {
  __shared__ float sm_m[kWarps], sm_l[kWarps];
  __shared__ float sm_acc[kWarps][kMaxHeadDim];
  const int h = blockIdx.x, row = blockIdx.y, split = blockIdx.z, n_splits = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = kv.head_dim;
  const int t = rows[row];
  const int ctx = idx.positions[t] + 1;
  const int g = h / (n_heads / kv.n_kv_heads);
  const int begin = max(split * kDecodeSplitKeys, window_first(ctx, window));
  const int end = min(ctx, split * kDecodeSplitKeys + kDecodeSplitKeys);
  const RowSlots slot_of(idx, t, kv.block_size);  // tree rows: their ancestors' slots
  WarpSoftmax sm(q + (int64_t)t * n_heads * hd + (int64_t)h * hd, hd, lane);
  for (int key = begin + warp; key < end; key += kWarps) sm.add(kv, slot_of(key), g, scale, softcap, lane);
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

constexpr int kGqaThreads = 128;  // also the tile: one key per thread while scoring
constexpr int kMaxGqa = 8;        // query heads per KV head the grouped kernel serves

__global__ void __launch_bounds__(kGqaThreads)
    decode_gqa_kernel(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                      PagedKv kv, AttnIndex idx, const int32_t* rows, float* ws_acc, float* ws_m, float* ws_l) {
  __shared__ float q_s[kMaxGqa][kMaxHeadDim];
  __shared__ float p_s[kMaxGqa][kGqaThreads];
  __shared__ int64_t slot_s[kGqaThreads];
  __shared__ float m_s[kMaxGqa], l_s[kMaxGqa], corr_s[kMaxGqa];
  // V partial sums: [head][kg * head_dim + d]; KG * head_dim <= 8 * kGqaThreads.
  __shared__ float red_s[kMaxGqa][8 * kGqaThreads];
  const int g = blockIdx.x, row = blockIdx.y, split = blockIdx.z, n_splits = gridDim.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hd = kv.head_dim, G = n_heads / kv.n_kv_heads;
  const int t = rows[row];
  const int ctx = idx.positions[t] + 1;
  const int begin = max(split * kDecodeSplitKeys, window_first(ctx, window));
  const int end = min(ctx, split * kDecodeSplitKeys + kDecodeSplitKeys);
  const RowSlots slot_of(idx, t, kv.block_size);  // tree rows: their ancestors' slots
  const float* qg = q + ((int64_t)t * n_heads + (int64_t)g * G) * hd;
  for (int i = tid; i < G * hd; i += kGqaThreads) q_s[i / hd][i % hd] = qg[i];
  if (tid < kMaxGqa) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  const int C = hd / 8, KG = kGqaThreads / C;  // V phase: chunk c of every KG-th key
  const int c = tid % C, kg = tid / C;
  float acc[kMaxGqa][8];
#pragma unroll
  for (int gq = 0; gq < kMaxGqa; ++gq)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[gq][e] = 0.0f;
  __syncthreads();

  for (int k0 = begin; k0 < end; k0 += kGqaThreads) {
    // (1) Scores of key k0 + tid for the G query heads.
    const int key = k0 + tid;
    float s[kMaxGqa];
#pragma unroll
    for (int gq = 0; gq < kMaxGqa; ++gq) s[gq] = 0.0f;
    if (key < end) {
      const int64_t slot = slot_of(key);
      slot_s[tid] = slot;
      const uint8_t* kp = kv_head(kv.k, kv.k_type, slot * kv.n_kv_heads + g, hd);
      for (int d0 = 0; d0 < hd; d0 += 8) {
        float x[8];
        kv_load8(kp, kv.k_type, hd, d0, x);
#pragma unroll
        for (int gq = 0; gq < kMaxGqa; ++gq)
          if (gq < G)
#pragma unroll
            for (int e = 0; e < 8; ++e) s[gq] += q_s[gq][d0 + e] * x[e];
      }
    }
#pragma unroll
    for (int gq = 0; gq < kMaxGqa; ++gq)
      if (gq < G) p_s[gq][tid] = key < end ? capped(s[gq] * scale, softcap) : -INFINITY;
    __syncthreads();
    // (2) Per head: the tile's max, exponentials and sum; rescale factor for what came before.
    for (int gq = warp; gq < G; gq += kGqaThreads / 32) {
      const float m_old = m_s[gq];
      float mx = -INFINITY;
      for (int i = lane; i < kGqaThreads; i += 32) mx = fmaxf(mx, p_s[gq][i]);
      const float m_new = fmaxf(m_old, warp_max(mx));  // finite: the tile holds a key
      float sum = 0.0f;
      for (int i = lane; i < kGqaThreads; i += 32) {
        const float p = expf(p_s[gq][i] - m_new);  // 0 for keys past the end
        p_s[gq][i] = p;
        sum += p;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float corr = expf(m_old - m_new);  // 0 when m_old is -inf
        corr_s[gq] = corr;
        l_s[gq] = l_s[gq] * corr + sum;
        m_s[gq] = m_new;
      }
    }
    __syncthreads();
    // (3) V: dims 8c..8c+7 of keys kg, kg + KG, ... of the tile.
    if (kg < KG) {
#pragma unroll
      for (int gq = 0; gq < kMaxGqa; ++gq)
        if (gq < G)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[gq][e] *= corr_s[gq];
      const int n = min(kGqaThreads, end - k0);
      for (int i = kg; i < n; i += KG) {
        float x[8];
        kv_load8(kv_head(kv.v, kv.v_type, slot_s[i] * kv.n_kv_heads + g, hd), kv.v_type, hd, 8 * c, x);
#pragma unroll
        for (int gq = 0; gq < kMaxGqa; ++gq)
          if (gq < G) {
            const float p = p_s[gq][i];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[gq][e] += p * x[e];
          }
      }
    }
    __syncthreads();  // p_s and slot_s are the next tile's
  }

  if (kg < KG)
#pragma unroll
    for (int gq = 0; gq < kMaxGqa; ++gq)
      if (gq < G)
#pragma unroll
        for (int e = 0; e < 8; ++e) red_s[gq][kg * hd + 8 * c + e] = acc[gq][e];
  __syncthreads();
  for (int i = tid; i < G * hd; i += kGqaThreads) {
    const int gq = i / hd, d = i % hd, h = g * G + gq;
    float a = 0.0f;
    for (int k = 0; k < KG; ++k) a += red_s[gq][k * hd + d];  // fixed order
    const int64_t part = ((int64_t)row * n_heads + h) * n_splits + split;
    if (n_splits == 1)
      out[(int64_t)t * n_heads * hd + (int64_t)h * hd + d] = a / l_s[gq];
    else
      ws_acc[part * hd + d] = a;
  }
  if (n_splits > 1 && tid < G) {
    const int64_t part = ((int64_t)row * n_heads + g * G + tid) * n_splits + split;
    ws_m[part] = m_s[tid];
    ws_l[part] = l_s[tid];
  }
}

// Merges the splits of one (row, head), in split order. At least one split holds a key (ctx >= 1
// and a window, when given, is at least one key wide).
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
                      float* workspace, void* stream, int window, float softcap) {
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
  if (kv.head_dim % 8 == 0 && n_heads / kv.n_kv_heads <= kMaxGqa) {
    dim3 grid(static_cast<unsigned>(kv.n_kv_heads), static_cast<unsigned>(n_rows),
              static_cast<unsigned>(n_splits));
    decode_gqa_kernel<<<grid, kGqaThreads, 0, st>>>(q, out, n_heads, scale, window, softcap, kv, idx, rows,
                                                    ws_acc, ws_m, ws_l);
  } else {
    dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_rows),
              static_cast<unsigned>(n_splits));
    decode_attend_kernel<<<grid, kWarps * 32, 0, st>>>(q, out, n_heads, scale, window, softcap, kv, idx,
                                                      rows, ws_acc, ws_m, ws_l);
  }
  CUDA_CHECK_LAUNCH();
  if (n_splits > 1) {
    dim3 rgrid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_rows));
    decode_reduce_kernel<<<rgrid, 128, 0, st>>>(out, n_heads, kv.head_dim, n_splits, rows, ws_acc,
                                                ws_m, ws_l);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace pagoda::cuda
