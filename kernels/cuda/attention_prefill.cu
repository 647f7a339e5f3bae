// Paged causal attention for prefill chunks, tiled: the same result as attention_decode for
// every row (softmax(scale * q.K) V over logical 0..positions[t] of the token's sequence, GQA
// head g = h / (n_heads / n_kv_heads)), but a tile of up to kPrefillTileQ query rows of one
// sequence shares each K/V tile it loads. K/V (including this chunk's own tokens, stored
// beforehand by store_kv) are read from the paged cache through the block table.
// Launch: grid (n_heads, n_tiles), 128 threads (heads fastest, so query heads sharing a KV head
// load the same K/V tiles close together in time). Shared memory (dynamic): the Q tile
// [16][head_dim], a K tile [32][head_dim+1] (padded against bank conflicts), a V tile
// [32][head_dim], scores [16][32] and the rows' positions. Per K tile: all threads load K/V
// (F16, F32 or Q8_0 -> F32 through kv_elem.cuh), compute the 16x32 masked scores, then the 8 threads owning a query row update
// its online softmax (each owns head dims sub, sub+8, ...). Plain FP32 arithmetic, no tensor
// cores: simple and exact-order, not peak speed.
// Assumptions: a tile's rows belong to one sequence (same block table); head_dim <= 256;
// n_heads a multiple of n_kv_heads; every row's position >= 0.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kTQ = kPrefillTileQ;  // query rows per tile
constexpr int kTK = 32;             // keys per K/V tile
constexpr int kThreads = 128;
constexpr int kPerRow = kThreads / kTQ;          // threads per query row (8)
constexpr int kPerThread = kMaxHeadDim / kPerRow;  // head dims per thread, at most (32)

size_t smem_bytes(int hd) {
  return sizeof(float) * (static_cast<size_t>(kTQ) * hd + static_cast<size_t>(kTK) * (hd + 1) +
                          static_cast<size_t>(kTK) * hd + kTQ * kTK) +
         sizeof(int) * kTQ;
}

__global__ void prefill_kernel(const float* q, float* out, int n_heads, float scale, PagedKv kv,
                               AttnIndex idx, const int32_t* tiles) {
  extern __shared__ float smem[];
  const int hd = kv.head_dim, ks = hd + 1;
  float* sQ = smem;                 // [kTQ][hd]
  float* sK = sQ + kTQ * hd;        // [kTK][hd + 1]
  float* sV = sK + kTK * ks;        // [kTK][hd]
  float* sS = sV + kTK * hd;        // [kTQ][kTK]
  int* sPos = reinterpret_cast<int*>(sS + kTQ * kTK);  // [kTQ]

  const int h = blockIdx.x, tile = blockIdx.y, tid = threadIdx.x;
  const int t0 = tiles[2 * tile], nq = tiles[2 * tile + 1];
  const int g = h / (n_heads / kv.n_kv_heads);
  const int32_t* bt = idx.block_tables + idx.token_bt[t0];
  const int64_t q_stride = (int64_t)n_heads * hd;

  for (int i = tid; i < kTQ * hd; i += kThreads) {
    const int r = i / hd, d = i % hd;
    sQ[i] = r < nq ? q[(int64_t)(t0 + r) * q_stride + (int64_t)h * hd + d] : 0.0f;
  }
  if (tid < kTQ) sPos[tid] = tid < nq ? idx.positions[t0 + tid] : -1;
  __syncthreads();
  int n_keys = 0;
  for (int r = 0; r < nq; ++r) n_keys = max(n_keys, sPos[r] + 1);

  const int qr = tid / kPerRow, sub = tid % kPerRow;
  const int my_pos = sPos[qr];
  float m = -INFINITY, l = 0.0f, acc[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) acc[j] = 0.0f;

  for (int kt = 0; kt < n_keys; kt += kTK) {
    __syncthreads();  // the previous tile's K/V/scores are no longer read
    for (int i = tid; i < kTK * hd; i += kThreads) {
      const int kk = i / hd, d = i % hd, key = kt + kk;
      float kval = 0.0f, vval = 0.0f;
      if (key < n_keys) {
        const int64_t slot =
            (int64_t)bt[key / kv.block_size] * kv.block_size + key % kv.block_size;
        const int64_t head_row = slot * kv.n_kv_heads + g;
        kval = kv_value(kv_head(kv.k, kv.k_type, head_row, hd), kv.k_type, hd, d);
        vval = kv_value(kv_head(kv.v, kv.v_type, head_row, hd), kv.v_type, hd, d);
      }
      sK[kk * ks + d] = kval;
      sV[kk * hd + d] = vval;
    }
    __syncthreads();
    for (int i = tid; i < kTQ * kTK; i += kThreads) {
      const int r = i / kTK, kk = i % kTK;
      float s = -INFINITY;
      if (kt + kk <= sPos[r]) {  // causal mask; rows past nq have position -1
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += sQ[r * hd + d] * sK[kk * ks + d];
        s = dot * scale;
      }
      sS[i] = s;
    }
    __syncthreads();
    if (my_pos >= kt) {  // this row sees at least one key of the tile
      const float* srow = sS + qr * kTK;
      float tile_max = -INFINITY;
      for (int kk = 0; kk < kTK; ++kk) tile_max = fmaxf(tile_max, srow[kk]);
      const float m_new = fmaxf(m, tile_max);
      const float corr = expf(m - m_new);  // 0 when m is -inf
      l *= corr;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) acc[j] *= corr;
      for (int kk = 0; kk < kTK; ++kk) {
        const float p = expf(srow[kk] - m_new);  // 0 for masked keys
        l += p;
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          const int d = sub + kPerRow * j;
          if (d < hd) acc[j] += p * sV[kk * hd + d];
        }
      }
      m = m_new;
    }
  }

  if (qr < nq) {
    float* o = out + (int64_t)(t0 + qr) * q_stride + (int64_t)h * hd;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int d = sub + kPerRow * j;
      if (d < hd) o[d] = acc[j] / l;
    }
  }
}

}  // namespace

void attention_prefill(const float* q, float* out, int n_heads, float scale, const PagedKv& kv,
                       const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles, void* stream) {
  if (kv.head_dim <= 0 || kv.head_dim > kMaxHeadDim)
    throw CudaError("attention_prefill: head_dim must be in 1.." + std::to_string(kMaxHeadDim));
  if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    throw CudaError("attention_prefill: n_heads must be a multiple of n_kv_heads");
  if (n_tiles <= 0) return;
  const size_t smem = smem_bytes(kv.head_dim);
  if (smem > 48 * 1024)  // above the default limit: opt in (sm_80+ allows up to 163 KB)
    CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
  if (n_tiles > 65535) throw CudaError("attention_prefill: more than 65535 tiles in one step");
  dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tiles));
  prefill_kernel<<<grid, kThreads, smem, as_stream(stream)>>>(q, out, n_heads, scale, kv, idx,
                                                              tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
