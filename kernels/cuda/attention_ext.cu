// Paged attention with a sliding window and/or soft-capped scores (gemma2/gemma3/phi3 layers):
//   out[t, h] = softmax_j(cap(scale * q[t, h] . K[j, g])) V[j, g]
// over logical j in max(0, positions[t] + 1 - window) .. positions[t] (window 0: from 0), with
// cap(s) = softcap * tanh(s / softcap) when softcap > 0, g = h / (n_heads / n_kv_heads).
// Launch: grid (n_heads, n_tokens), 32 threads = one warp per (token, head). Lanes hold head
// dims lane, lane + 32, ... (head_dim <= kMaxHeadDim); each key's dot product is a warp
// reduction and the warp keeps an online softmax (max, sum, accumulator) over the keys in
// index order. Simple and exact rather than fast: one warp walks its row's whole window. A
// row's result depends on its own context only (batch invariance).
// Assumptions: head_dim <= kMaxHeadDim; n_heads a multiple of n_kv_heads; an F16, F32 or Q8_0
// cache (K/V values read through kv_elem.cuh); no token-tree rows (the engine refuses them here).
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kPerLane = kMaxHeadDim / 32;

__global__ void attention_ext_kernel(const float* q, float* out, int n_heads, float scale, int window,
                                     float softcap, PagedKv kv, AttnIndex idx) {
  const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
  const int hd = kv.head_dim;
  const int ctx = idx.positions[t] + 1;
  const int first = window > 0 ? max(0, ctx - window) : 0;
  const int g = h / (n_heads / kv.n_kv_heads);
  const int32_t* bt = idx.block_tables + idx.token_bt[t];
  const float* qh = q + (int64_t)t * n_heads * hd + (int64_t)h * hd;
  float qr[kPerLane], acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    qr[j] = d < hd ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int key = first; key < ctx; ++key) {
    const int64_t slot = (int64_t)bt[key / kv.block_size] * kv.block_size + key % kv.block_size;
    const uint8_t* kp = kv_head(kv.k, kv.type, slot * kv.n_kv_heads + g, hd);
    const uint8_t* vp = kv_head(kv.v, kv.type, slot * kv.n_kv_heads + g, hd);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) dot += qr[j] * kv_value(kp, kv.type, hd, d);
    }
    float s = warp_sum(dot) * scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 when m is -inf
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * corr + p * kv_value(vp, kv.type, hd, d);
    }
    m = m_new;
  }
  float* oh = out + (int64_t)t * n_heads * hd + (int64_t)h * hd;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) oh[d] = acc[j] / l;
  }
}

}  // namespace

void attention_ext(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                   const PagedKv& kv, const AttnIndex& idx, int64_t n_tokens, void* stream) {
  if (n_tokens <= 0) return;
  if (kv.head_dim > kMaxHeadDim || kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0)
    throw CudaError("attention_ext: head_dim above " + std::to_string(kMaxHeadDim) + " or a bad head layout");
  attention_ext_kernel<<<dim3(n_heads, (unsigned)n_tokens), 32, 0, as_stream(stream)>>>(
      q, out, n_heads, scale, window, softcap, kv, idx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
