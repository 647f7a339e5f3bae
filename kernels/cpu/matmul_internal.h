// Shared between matmul.cpp (dispatch, scalar kernels) and the per-ISA kernel files.
// Everything here is `static inline` on purpose: each translation unit gets its own copy
// compiled with its own ISA flags, so an AVX-512 build of a helper can never be linked into
// portable code (which a shared inline function would allow).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/cpu/quants.h"
#include "kernels/ggml_type.h"

namespace pagoda::cpu::detail {

// Activations quantized per row to int8 blocks of 32: for row i and block b,
// x[i][32b + t] ~= q[i][32b + t] * d[i][b], with s[i][2b + h] = sum of the 16 q of half h.
struct QuantActs {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* s = nullptr;
  int64_t k = 0;  // elements per row
  const int8_t* row_q(int64_t i) const { return q + i * k; }
  const float* row_d(int64_t i) const { return d + i * (k / 32); }
  const int16_t* row_s(int64_t i) const { return s + i * (k / 16); }
};

// Quantizes one row of k floats (k a multiple of 32): d = amax / 127, q = nearest(x * (1 / d)).
void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* d, int16_t* s);
// The same, bit-identical, with AVX-512 (only when cpu_supports(CpuIsa::Avx512)).
void quantize_activation_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int16_t* s);

// Everything a kernel needs for one call. Kernels compute outputs [o_begin, o_end) for all n rows.
struct MatmulArgs {
  GgmlType type;
  const uint8_t* w;   // row o starts at w + o * row_bytes
  size_t row_bytes;
  int64_t out_features;
  int64_t k;          // in_features
  const float* x;     // [n][k] (float weight types)
  QuantActs acts;     // quantized x (quantized weight types)
  int64_t n;
  float* out;         // [n][out_features]
};

void matmul_range_scalar(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
void matmul_range_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
void matmul_range_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// AVX-512 quantized kernels for n <= kFewRowsMax activation rows (decode), without tiles.
constexpr int64_t kFewRowsMax = 16;
void matmul_few_rows_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// The same at the AVX2 level.
void matmul_few_rows_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);

// Half -> float: one instruction where the translation unit has F16C, else the portable routine.
static inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

static inline bool is_quantized(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K;
}

// ---- The quantized-weight arithmetic every ISA reproduces exactly -------------------------
//
// Each 32-element weight block is decoded to unsigned bytes u[32] with an integer offset
// (value = scale * (u - offset), minus a min term for Q4_K):
//   Q8_0: u = q + 128 (offset 128), s0 = s1 = d
//   Q4_0: u = nibble  (offset 8),   s0 = s1 = d
//   Q4_K: u = nibble  (offset 0),   s0 = s1 = d * sc[j], m = dmin * min[j]
//   Q6_K: u = 6 bits  (offset 32),  s0 = d * sc[2j] (elements 0..15), s1 = d * sc[2j+1] (16..31)
// and with activations (xq, dx, xs0, xs1) the pair accumulator `acc` is updated by
// accumulate_block below. SIMD kernels compute the same integers (in any order: they are exact)
// and must then perform the same float operations in the same order.

static inline constexpr int weight_offset(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return 128;
    case GgmlType::Q4_0: return 8;
    case GgmlType::Q6_K: return 32;
    default: return 0;
  }
}

// Decodes 32-element block b (0-based, in units of 32 elements) of a weight row.
static inline void decode_block32(GgmlType t, const uint8_t* row, int64_t b, uint8_t* u, float& s0, float& s1,
                                  float& m) {
  s0 = s1 = m = 0.f;
  switch (t) {
    case GgmlType::Q8_0: {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(blk->qs[i]) ^ 0x80;
      s0 = s1 = half_to_float(blk->d);
      return;
    }
    case GgmlType::Q4_0: {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      for (int i = 0; i < 16; ++i) u[i] = blk->qs[i] & 15, u[i + 16] = blk->qs[i] >> 4;
      s0 = s1 = half_to_float(blk->d);
      return;
    }
    case GgmlType::Q4_K: {
      const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8);
      const uint8_t* qs = blk->qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int i = 0; i < 32; ++i) u[i] = (qs[i] >> shift) & 15;
      int sc, mn;
      q4k_scale_min(j, blk->scales, sc, mn);
      s0 = s1 = half_to_float(blk->d) * static_cast<float>(sc);
      m = half_to_float(blk->dmin) * static_cast<float>(mn);
      return;
    }
    case GgmlType::Q6_K: {
      const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8), h = j / 4, p = j % 4;
      const uint8_t* ql = blk->ql + 64 * h + 32 * (p & 1);
      const uint8_t* qh = blk->qh + 32 * h;
      const int nib = 4 * (p >> 1), hs = 2 * p;
      for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(((ql[i] >> nib) & 15) | (((qh[i] >> hs) & 3) << 4));
      const float d = half_to_float(blk->d);
      s0 = d * static_cast<float>(blk->scales[2 * j]);
      s1 = d * static_cast<float>(blk->scales[2 * j + 1]);
      return;
    }
    default: return;
  }
}

// acc += this block's contribution, in the one order all ISAs use.
static inline float accumulate_block(GgmlType t, const uint8_t* u, float s0, float s1, float m, const int8_t* xq,
                                     float dx, int xs0, int xs1, float acc) {
  const int off = weight_offset(t);
  int32_t i0 = 0, i1 = 0;
  for (int e = 0; e < 16; ++e) i0 += u[e] * xq[e];
  for (int e = 16; e < 32; ++e) i1 += u[e] * xq[e];
  if (t == GgmlType::Q6_K) {
    acc = std::fma(static_cast<float>(i0 - off * xs0), s0 * dx, acc);
    return std::fma(static_cast<float>(i1 - off * xs1), s1 * dx, acc);
  }
  acc = std::fma(static_cast<float>(i0 + i1 - off * (xs0 + xs1)), s0 * dx, acc);
  if (t == GgmlType::Q4_K) acc = std::fma(-static_cast<float>(xs0 + xs1), m * dx, acc);
  return acc;
}

}  // namespace pagoda::cpu::detail
