// Integer view of the GGML weight block types for the int8 (dp4a) kernels: a 32-value piece of
// a block as 32 signed 8-bit integers w and, per half of 16 values, a scale and an offset, with
//   value[l] = scale[h] * w[l] + offset[h],   h = l / 16,
// equal (up to the rounding of that one product and sum) to what quant_decode.cuh decodes.
// Then, with activations quantized to int8 blocks of 32 (x[l] ~= dx * q[l], qsum[h] = sum of
// the q of half h), a piece's dot product is
//   dx * (scale[0] * dot(w, q)[half 0] + scale[1] * dot(w, q)[half 1] +
//         offset[0] * qsum[0] + offset[1] * qsum[1])
// with the two integer dot products exact (dp4a), as the CPU's int8 kernels compute it
// (kernels/cpu/matmul.h): both sides sum the same integers, so they differ only in how the few
// float terms per piece round.
//   IntPiece::w   the 32 integers packed 4 a word, little-endian (value 4j + b in byte b of w[j])
// Every type's integers fit int8: Q8_0 [-128, 127], Q4_0 [-8, 7], Q4_1 [0, 15], Q5_0 [-16, 15],
// Q5_1 [0, 31], IQ4_NL/IQ4_XS levels [-127, 113], Q2_K [0, 3], Q3_K [-4, 3], Q4_K [0, 15],
// Q5_K [0, 31], Q6_K [-32, 31].
// Assumptions: as quant_decode.cuh (2-byte aligned blocks, bytewise reads).
#pragma once

#include "kernels/cuda/quant_decode.cuh"

namespace pagoda::cuda::quant {

struct IntPiece {
  int w[8];
  float scale[2], offset[2];
};

// Packs the 32 integers f(l), l < 32, into p.w.
template <class F>
__device__ __forceinline__ void pack_ints(IntPiece& p, F&& f) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
    p.w[j] = (f(4 * j) & 0xFF) | ((f(4 * j + 1) & 0xFF) << 8) | ((f(4 * j + 2) & 0xFF) << 16) |
             ((unsigned)(f(4 * j + 3) & 0xFF) << 24);
}

__device__ __forceinline__ void same_halves(IntPiece& p, float scale, float offset) {
  p.scale[0] = p.scale[1] = scale;
  p.offset[0] = p.offset[1] = offset;
}

// IntDecode<Block>::piece(blk, s, p): piece s (< Block::kPieces) of the block at blk.
template <class B>
struct IntDecode;

template <>
struct IntDecode<BlockQ8_0> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return (int)(int8_t)b[2 + l]; });
    same_halves(p, half_at(b), 0.0f);
  }
};

template <>
struct IntDecode<BlockQ4_0> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return nibble32(b + 2, l) - 8; });
    same_halves(p, half_at(b), 0.0f);
  }
};

template <>
struct IntDecode<BlockQ4_1> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return nibble32(b + 4, l); });
    same_halves(p, half_at(b), half_at(b + 2));
  }
};

template <>
struct IntDecode<BlockQ5_0> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return (nibble32(b + 6, l) | q5_high(b + 2, l)) - 16; });
    same_halves(p, half_at(b), 0.0f);
  }
};

template <>
struct IntDecode<BlockQ5_1> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return nibble32(b + 8, l) | q5_high(b + 4, l); });
    same_halves(p, half_at(b), half_at(b + 2));
  }
};

template <>
struct IntDecode<BlockIQ4_NL> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int, IntPiece& p) {
    pack_ints(p, [&](int l) { return iq4nl_int(nibble32(b + 2, l)); });
    same_halves(p, half_at(b), 0.0f);
  }
};

template <>
struct IntDecode<BlockQ2_K> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    const uint8_t* qs = b + 16 + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    pack_ints(p, [&](int l) { return (qs[l] >> shift) & 3; });
    for (int h = 0; h < 2; ++h) {
      const int sc = b[2 * s + h];
      p.scale[h] = __fmul_rn(d, (float)(sc & 15));
      p.offset[h] = -__fmul_rn(dmin, (float)(sc >> 4));
    }
  }
};

template <>
struct IntDecode<BlockQ3_K> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    const float d = half_at(b + 108);
    const uint8_t* qs = b + 32 + 32 * (s / 4);
    const int shift = 2 * (s % 4);
    pack_ints(p, [&](int l) { return (((qs[l] >> shift) & 3) | (((b[l] >> s) & 1) << 2)) - 4; });
    for (int h = 0; h < 2; ++h) {
      p.scale[h] = __fmul_rn(d, (float)(BlockQ3_K::scale(2 * s + h, b + 96) - 32));
      p.offset[h] = 0.0f;
    }
  }
};

template <>
struct IntDecode<BlockQ4_K> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const uint8_t* qs = b + 16 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    pack_ints(p, [&](int l) { return (qs[l] >> shift) & 15; });
    same_halves(p, __fmul_rn(half_at(b), (float)sc), -__fmul_rn(half_at(b + 2), (float)m));
  }
};

template <>
struct IntDecode<BlockQ5_K> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    pack_ints(p, [&](int l) { return ((qs[l] >> shift) & 15) | (((qh[l] >> s) & 1) << 4); });
    same_halves(p, __fmul_rn(half_at(b), (float)sc), -__fmul_rn(half_at(b + 2), (float)m));
  }
};

template <>
struct IntDecode<BlockQ6_K> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    const int h = s / 4, r = s % 4;
    const uint8_t* ql = b + 64 * h + 32 * (r & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
    const float d = half_at(b + 208);
    pack_ints(p, [&](int l) {
      const int lo = r < 2 ? (ql[l] & 15) : (ql[l] >> 4);
      return (lo | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
    });
    for (int k = 0; k < 2; ++k) {
      p.scale[k] = __fmul_rn(d, (float)sc[k]);
      p.offset[k] = 0.0f;
    }
  }
};

template <>
struct IntDecode<BlockIQ4_XS> {
  static __device__ __forceinline__ void piece(const uint8_t* b, int s, IntPiece& p) {
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | (((scales_h >> (2 * s)) & 3) << 4);
    pack_ints(p, [&](int l) { return iq4nl_int(nibble32(b + 8 + 16 * s, l)); });
    same_halves(p, __fmul_rn(half_at(b), (float)(ls - 32)), 0.0f);
  }
};

}  // namespace pagoda::cuda::quant
