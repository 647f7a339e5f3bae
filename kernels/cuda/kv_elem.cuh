// Element-type-dispatched access to KV-cache head rows for the CUDA kernels (store, attention,
// K-shift): the byte layout is kernels/kv_layout.h's, the one the CPU backend uses, so a cache
// written by either reads the same. Q8_0 is quantized by the CPU's rule (kernels/cpu/kv_quant.cpp):
// d = max|x| / 127 in f32, q = roundf(x * (1/d)), d stored as f16.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/ggml_type.h"
#include "kernels/kv_layout.h"

namespace pagoda::cuda {

// Units a head row is stored in: Q8_0 groups, or single values.
__host__ __device__ inline int kv_units_per_head(GgmlType t, int hd) {
  return t == GgmlType::Q8_0 ? hd / kv_q8_group(hd) : hd;
}

// Head row `head_row` (slot * n_kv_heads + kv_head) of a layer's pool.
__device__ __forceinline__ const uint8_t* kv_head(const void* pool, GgmlType t, int64_t head_row, int hd) {
  return static_cast<const uint8_t*>(pool) + head_row * kv_head_bytes(t, hd);
}
__device__ __forceinline__ uint8_t* kv_head(void* pool, GgmlType t, int64_t head_row, int hd) {
  return static_cast<uint8_t*>(pool) + head_row * kv_head_bytes(t, hd);
}

// Value d of a head row.
__device__ __forceinline__ float kv_value(const uint8_t* head, GgmlType t, int hd, int d) {
  if (t == GgmlType::F16) return __half2float(reinterpret_cast<const __half*>(head)[d]);
  if (t == GgmlType::F32) return reinterpret_cast<const float*>(head)[d];
  const int g = kv_q8_group(hd);
  const uint8_t* grp = head + (int64_t)(d / g) * (g + 2);
  const float scale = __half2float(*reinterpret_cast<const __half*>(grp));
  return (float)reinterpret_cast<const int8_t*>(grp + 2)[d % g] * scale;
}

// Values d0 .. d0 + 7 of a head row into x (d0 a multiple of 8, head_dim a multiple of 8): one
// 16-byte load for F16, two for F32 (head rows of those types start 16-byte aligned when
// head_dim is a multiple of 8); for Q8_0 the 8 values lie in one group (groups are 8, 16 or 32
// wide) and are read as four 2-byte words (the group's bytes are only 2-byte aligned).
__device__ __forceinline__ void kv_load8(const uint8_t* head, GgmlType t, int hd, int d0, float* x) {
  if (t == GgmlType::F16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(head + 2 * (int64_t)d0);
    const __half* h = reinterpret_cast<const __half*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = __half2float(h[e]);
    return;
  }
  if (t == GgmlType::F32) {
    const float4 a = reinterpret_cast<const float4*>(head)[d0 / 4];
    const float4 b = reinterpret_cast<const float4*>(head)[d0 / 4 + 1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
    return;
  }
  const int g = kv_q8_group(hd);
  const uint8_t* grp = head + (int64_t)(d0 / g) * (g + 2);
  const float scale = __half2float(*reinterpret_cast<const __half*>(grp));
  const uint16_t* w = reinterpret_cast<const uint16_t*>(grp + 2 + d0 % g);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint16_t pair = w[e];
    x[2 * e] = (float)(int8_t)(pair & 0xff) * scale;
    x[2 * e + 1] = (float)(int8_t)(pair >> 8) * scale;
  }
}

// Stores unit u (kv_units_per_head) of a head row from x, the head's hd values.
__device__ __forceinline__ void kv_store_unit(uint8_t* head, GgmlType t, int hd, int u, const float* x) {
  if (t == GgmlType::F16) {
    reinterpret_cast<__half*>(head)[u] = __float2half_rn(x[u]);
    return;
  }
  if (t == GgmlType::F32) {
    reinterpret_cast<float*>(head)[u] = x[u];
    return;
  }
  const int g = kv_q8_group(hd);
  const float* xs = x + (int64_t)u * g;
  float amax = 0.0f;
  for (int i = 0; i < g; ++i) amax = fmaxf(amax, fabsf(xs[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t* grp = head + (int64_t)u * (g + 2);
  *reinterpret_cast<__half*>(grp) = __float2half_rn(d);
  int8_t* q = reinterpret_cast<int8_t*>(grp + 2);
  for (int i = 0; i < g; ++i) q[i] = (int8_t)roundf(xs[i] * id);
}

}  // namespace pagoda::cuda
