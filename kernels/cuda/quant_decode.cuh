// Device decoding of the GGML weight block types, 32 values at a time, as the kernels that read
// quantized weights use it (dequantize.cu, gemv_quant.cu, embed.cu). Every type is a struct
//   kElems  values per block (32, or 256 for the K-quants and IQ4_XS)
//   kBytes  bytes per block (the GGUF layout, kernels/cpu/quants.h)
//   kPieces = kElems / 32
//   decode32(blk, s, y): y[0..31] = values 32s .. 32s + 31 of the block at blk, s < kPieces
// Each value is computed with the operations, in the order, of the CPU reference
// (kernels/cpu/quants*.cpp dequantize_*), with explicit rounding intrinsics so that no FMA
// contraction changes a bit: decode32 gives the CPU's floats exactly.
// Assumptions: blk is 2-byte aligned (every block size and row size of these types is even, and
// the fp16 fields sit at even offsets); fields are read bytewise or as halves, never wider.
// with_quant_type (host) calls f(Block{}) for the block struct of a runtime GgmlType and returns
// false for a type that has none.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/ggml_type.h"

namespace pagoda::cuda::quant {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// The 16 IQ4_NL levels (kernels/cpu/quants.h kIq4nlValues) as int8 bytes of two words, so no
// table in device memory is needed: -127 -104 -83 -65 -49 -35 -22 -10 | 1 13 25 38 53 69 89 113.
__device__ __forceinline__ int iq4nl_int(int q) {
  const unsigned long long lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull;
  return (int)(int8_t)(((q < 8 ? lo : hi) >> (8 * (q & 7))) & 0xFF);
}
__device__ __forceinline__ float iq4nl_level(int q) { return (float)iq4nl_int(q); }

// Value i (0..31) of a 32-value block's 4-bit indices (qs: 16 bytes; low nibbles 0..15).
__device__ __forceinline__ int nibble32(const uint8_t* qs, int i) {
  return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

// The 6-bit scale and min of Q4_K / Q5_K sub-block j (cpu::q4k_scale_min).
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

struct BlockQ8_0 {
  static constexpr int kElems = 32, kBytes = 34, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b);
    for (int i = 0; i < 32; ++i) y[i] = __fmul_rn((float)(int8_t)b[2 + i], d);
  }
};

struct BlockQ4_0 {
  static constexpr int kElems = 32, kBytes = 18, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b);
    for (int i = 0; i < 32; ++i) y[i] = __fmul_rn((float)(nibble32(b + 2, i) - 8), d);
  }
};

struct BlockQ4_1 {
  static constexpr int kElems = 32, kBytes = 20, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b), m = half_at(b + 2);
    for (int i = 0; i < 32; ++i) y[i] = __fadd_rn(__fmul_rn((float)nibble32(b + 4, i), d), m);
  }
};

// Bit 4 of value i of a Q5 block: bit i of the little-endian word qh.
__device__ __forceinline__ int q5_high(const uint8_t* qh, int i) { return ((qh[i / 8] >> (i % 8)) & 1) << 4; }

struct BlockQ5_0 {
  static constexpr int kElems = 32, kBytes = 22, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b);
    for (int i = 0; i < 32; ++i) y[i] = __fmul_rn((float)((nibble32(b + 6, i) | q5_high(b + 2, i)) - 16), d);
  }
};

struct BlockQ5_1 {
  static constexpr int kElems = 32, kBytes = 24, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b), m = half_at(b + 2);
    for (int i = 0; i < 32; ++i)
      y[i] = __fadd_rn(__fmul_rn((float)(nibble32(b + 8, i) | q5_high(b + 4, i)), d), m);
  }
};

struct BlockIQ4_NL {
  static constexpr int kElems = 32, kBytes = 18, kPieces = 1;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int, float* y) {
    const float d = half_at(b);
    for (int i = 0; i < 32; ++i) y[i] = __fmul_rn(d, iq4nl_level(nibble32(b + 2, i)));
  }
};

// Q2_K {scales[16], qs[64], d, dmin}: value 32s + l is bits 2(s%4).. of qs[32(s/4) + l], with
// sub-block (of 16) scale/min byte scales[2s + l/16].
struct BlockQ2_K {
  static constexpr int kElems = 256, kBytes = 84, kPieces = 8;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    const uint8_t* qs = b + 16 + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    for (int l = 0; l < 32; ++l) {
      const int sc = b[2 * s + l / 16];
      const float v = __fmul_rn(__fmul_rn(d, (float)(sc & 15)), (float)((qs[l] >> shift) & 3));
      y[l] = __fsub_rn(v, __fmul_rn(dmin, (float)(sc >> 4)));
    }
  }
};

// Q3_K {hmask[32], qs[64], scales[12], d}: low bits as Q2_K's, bit 2 is bit s of hmask[l].
struct BlockQ3_K {
  static constexpr int kElems = 256, kBytes = 110, kPieces = 8;
  static __device__ __forceinline__ int scale(int j, const uint8_t* sc) {  // cpu::q3k_scale
    const int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
    return lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
  }
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    const float d = half_at(b + 108);
    const uint8_t* qs = b + 32 + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    const float d0 = __fmul_rn(d, (float)(scale(2 * s, b + 96) - 32));
    const float d1 = __fmul_rn(d, (float)(scale(2 * s + 1, b + 96) - 32));
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[l] >> shift) & 3) | (((b[l] >> s) & 1) << 2);
      y[l] = __fmul_rn(l < 16 ? d0 : d1, (float)(q - 4));
    }
  }
};

// Q4_K {d, dmin, scales[12], qs[128]}: sub-block s is the low (s even) or high nibbles of
// qs[32(s/2) ..].
struct BlockQ4_K {
  static constexpr int kElems = 256, kBytes = 144, kPieces = 8;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const float dl = __fmul_rn(half_at(b), (float)sc), ml = __fmul_rn(half_at(b + 2), (float)m);
    const uint8_t* qs = b + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) y[l] = __fsub_rn(__fmul_rn(dl, (float)((qs[l] >> shift) & 15)), ml);
  }
};

// Q5_K {d, dmin, scales[12], qh[32], qs[128]}: Q4_K's nibbles plus bit s of qh[l] as bit 4.
struct BlockQ5_K {
  static constexpr int kElems = 256, kBytes = 176, kPieces = 8;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const float dl = __fmul_rn(half_at(b), (float)sc), ml = __fmul_rn(half_at(b + 2), (float)m);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[l] >> shift) & 15) | (((qh[l] >> s) & 1) << 4);
      y[l] = __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
  }
};

// Q6_K {ql[128], qh[64], scales[16] (int8), d}: piece s is r = s % 4 of half h = s / 4: low
// bits from ql[64h + l + 32(r&1)] (low nibble for r < 2), high bits (qh[32h + l] >> 2r) & 3.
struct BlockQ6_K {
  static constexpr int kElems = 256, kBytes = 210, kPieces = 8;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    const int h = s / 4, r = s % 4;
    const uint8_t* ql = b + 64 * h + 32 * (r & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
    const float d = half_at(b + 208);
    const float d0 = __fmul_rn(d, (float)sc[0]), d1 = __fmul_rn(d, (float)sc[1]);
    for (int l = 0; l < 32; ++l) {
      const int lo = r < 2 ? (ql[l] & 15) : (ql[l] >> 4);
      const int q = (lo | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
      y[l] = __fmul_rn(l < 16 ? d0 : d1, (float)q);
    }
  }
};

// IQ4_XS {d, scales_h, scales_l[4], qs[128]}: sub-block s scale ls (6 bits), indices in
// qs[16s ..] laid out as an IQ4_NL block's.
struct BlockIQ4_XS {
  static constexpr int kElems = 256, kBytes = 136, kPieces = 8;
  static __device__ __forceinline__ void decode32(const uint8_t* b, int s, float* y) {
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
    const float dl = __fmul_rn(half_at(b), (float)(ls - 32));
    for (int i = 0; i < 32; ++i) y[i] = __fmul_rn(dl, iq4nl_level(nibble32(b + 8 + 16 * s, i)));
  }
};

// Calls f(Block{}) for type t; false when t has no block decoder here (plain types included).
template <class F>
bool with_quant_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q8_0: f(BlockQ8_0{}); return true;
    case GgmlType::Q4_0: f(BlockQ4_0{}); return true;
    case GgmlType::Q4_1: f(BlockQ4_1{}); return true;
    case GgmlType::Q5_0: f(BlockQ5_0{}); return true;
    case GgmlType::Q5_1: f(BlockQ5_1{}); return true;
    case GgmlType::IQ4_NL: f(BlockIQ4_NL{}); return true;
    case GgmlType::Q2_K: f(BlockQ2_K{}); return true;
    case GgmlType::Q3_K: f(BlockQ3_K{}); return true;
    case GgmlType::Q4_K: f(BlockQ4_K{}); return true;
    case GgmlType::Q5_K: f(BlockQ5_K{}); return true;
    case GgmlType::Q6_K: f(BlockQ6_K{}); return true;
    case GgmlType::IQ4_XS: f(BlockIQ4_XS{}); return true;
    default: return false;
  }
}

}  // namespace pagoda::cuda::quant
