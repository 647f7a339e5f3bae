// Device pieces shared by the one-warp-per-row paged-attention kernels (attention_decode.cu,
// attention_window_softcap.cu): where a row's logical key lives (its block table, or for a token-tree row
// its ancestors' slot list, the one place tree rows differ), the query row held in registers,
// and one warp's online-softmax step over a key. Lanes hold head dims lane, lane + 32, ...
// (head_dim <= kMaxHeadDim). Include after kernels/cuda/common.cuh, kv_elem.cuh and ops.h.
#pragma once

#include <climits>

namespace pagoda::cuda {

constexpr int kWarpAttnPerLane = kMaxHeadDim / 32;

// The slots of token t's logical keys: index i lives at block_table[i / block_size] *
// block_size + i % block_size, except a tree row's indices from tail_base (its sequence's
// n_past) on, which come from the list tail (AttnIndex::tree_index / tree_slots).
struct RowSlots {
  const int32_t* bt;
  int block_size;
  int tail_base;
  const int32_t* tail;

  __device__ __forceinline__ RowSlots(const AttnIndex& idx, int t, int bs)
      : bt(idx.block_tables + idx.token_bt[t]), block_size(bs), tail_base(INT_MAX), tail(nullptr) {
    const int tree_at = idx.tree_index ? idx.tree_index[t] : -1;
    if (tree_at >= 0) {
      tail_base = idx.tree_slots[tree_at];
      tail = idx.tree_slots + tree_at + 1;
    }
  }
  __device__ __forceinline__ int64_t operator()(int key) const {
    return key >= tail_base ? (int64_t)tail[key - tail_base]
                            : (int64_t)bt[key / block_size] * block_size + key % block_size;
  }
};

// One warp's running softmax (max m, sum l, accumulator acc) for one query row and head.
struct WarpSoftmax {
  float qr[kWarpAttnPerLane], acc[kWarpAttnPerLane];
  float m, l;

  // qh: the row's head_dim query values.
  __device__ __forceinline__ WarpSoftmax(const float* qh, int hd, int lane) : m(-INFINITY), l(0.0f) {
#pragma unroll
    for (int j = 0; j < kWarpAttnPerLane; ++j) {
      const int d = lane + 32 * j;
      qr[j] = d < hd ? qh[d] : 0.0f;
      acc[j] = 0.0f;
    }
  }

  // Adds the key at `slot` of KV head g: s = scale * q.k, then softcap * tanh(s / softcap) when
  // softcap > 0. All 32 lanes must call it (the dot product is a warp reduction).
  __device__ __forceinline__ void add(const PagedKv& kv, int64_t slot, int g, float scale, float softcap,
                                      int lane) {
    const int hd = kv.head_dim;
    const uint8_t* kp = kv_head(kv.k, kv.k_type, slot * kv.n_kv_heads + g, hd);
    const uint8_t* vp = kv_head(kv.v, kv.v_type, slot * kv.n_kv_heads + g, hd);
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kWarpAttnPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) dot += qr[j] * kv_value(kp, kv.k_type, hd, d);
    }
    float s = warp_sum(dot) * scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 when m is -inf
    const float p = expf(s - m_new);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < kWarpAttnPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * corr + p * kv_value(vp, kv.v_type, hd, d);
    }
    m = m_new;
  }
};

}  // namespace pagoda::cuda
