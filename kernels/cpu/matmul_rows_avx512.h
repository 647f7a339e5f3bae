// Building blocks of the AVX-512 few-rows kernels (matmul_rows_avx512.cpp; included by AVX-512
// translation units only, everything static inline for the reason matmul_internal.h gives).
//
// The "row quad" layout: a zmm whose 128-bit lane c holds 16 bytes of weight row 4c + k (k = 0..3
// picks one of four registers). Four such registers cover 16 output rows; after vpdpbusd against
// an activation piece broadcast to every lane, reduce_quads turns them into one register of 16
// per-row int32 sums in row order with 9 instructions (a register pair per 2 rows would need
// about twice that). The same layout lets a K-quant super-block's scales be decoded for 16 rows
// with 512-bit in-lane shuffles: the head of each row's block lands in a lane, the per-type
// field extraction runs on 4 rows at once, and an 8-instruction byte transpose (transpose_fields)
// turns rows into lanes.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_internal.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own placeholders.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::cpu::detail {

constexpr int kGroup = 16;  // outputs per group: one zmm of int32/float lanes

static inline __mmask16 lane_mask(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Scales of one scale group (blocks_per_group(T) blocks) for 16 outputs, [block in group][output].
template <GgmlType T>
struct GroupScales {
  alignas(64) float s0[blocks_per_group(T)][kGroup];
  alignas(64) float s1[blocks_per_group(T)][kGroup];
  alignas(64) float m[blocks_per_group(T)][kGroup];
  alignas(64) float m1[blocks_per_group(T)][kGroup];
};

// One activation row's blocks as the epilogue needs them: xs the int16 half sums, fsum (affine
// types only) float(xs[2b] + xs[2b + 1]) per block, computed once per call rather than per
// output group, dx the scales.
struct ActRow {
  const int8_t* q;
  const float* d;
  const int16_t* s;
  const float* fsum;
};

// acc += the epilogue of accumulate_block (matmul_internal.h) for block b of the row and block j
// of the scale group, 16 outputs at a time: h0, h1 are the outputs' integer sums over elements
// 0-15 and 16-31 (for the types without half scales only h0 + h1 matters). The same float
// operations in the same order as accumulate_block.
template <GgmlType T>
static inline __m512 block_epilogue(__m512 acc, __m512i h0, __m512i h1, const GroupScales<T>& sc, int j,
                                    const ActRow& x, int64_t b) {
  const int16_t* xs = x.s + 2 * b;
  const __m512 dx = _mm512_set1_ps(x.d[b]);
  const __m512 s0 = _mm512_load_ps(sc.s0[j]);
  constexpr int off = weight_offset(T);
  if constexpr (half_scales(T)) {
    const __m512i i0 = _mm512_sub_epi32(h0, _mm512_set1_epi32(off * xs[0]));
    const __m512i i1 = _mm512_sub_epi32(h1, _mm512_set1_epi32(off * xs[1]));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(s0, dx), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(_mm512_load_ps(sc.s1[j]), dx), acc);
    if constexpr (half_mins(T)) {
      acc = _mm512_fnmadd_ps(_mm512_set1_ps(static_cast<float>(xs[0])), _mm512_mul_ps(_mm512_load_ps(sc.m[j]), dx), acc);
      acc = _mm512_fnmadd_ps(_mm512_set1_ps(static_cast<float>(xs[1])), _mm512_mul_ps(_mm512_load_ps(sc.m1[j]), dx), acc);
    }
    return acc;
  }
  __m512i isum = _mm512_add_epi32(h0, h1);
  if constexpr (off != 0) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(off * (xs[0] + xs[1])));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(s0, dx), acc);
  if constexpr (block_min(T)) acc = _mm512_fnmadd_ps(_mm512_set1_ps(x.fsum[b]), _mm512_mul_ps(_mm512_load_ps(sc.m[j]), dx), acc);
  return acc;
}

constexpr int kQuadRows = 16;  // rows per quad set: one zmm of int32/float lanes

// 16 bytes at p + off of the rows row[0..16): z[k] lane c = row 4c + k. The upper lanes come from
// masked broadcasts (a load and a p0/p5 uop) rather than 128-bit inserts (port 5 only).
static inline void load_quads(const uint8_t* const row[kQuadRows], size_t off, __m512i z[4]) {
  for (int k = 0; k < 4; ++k) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[k] + off)));
    v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[4 + k] + off)));
    v = _mm512_mask_broadcast_i32x4(v, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[8 + k] + off)));
    v = _mm512_mask_broadcast_i32x4(v, 0xF000, _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[12 + k] + off)));
    z[k] = v;
  }
}

// 32 bytes at p + off of the rows: lo[k] lane c = bytes 0-15 of row 4c + k, hi[k] bytes 16-31.
static inline void load_quads32(const uint8_t* const row[kQuadRows], size_t off, __m512i lo[4], __m512i hi[4]) {
  for (int k = 0; k < 4; ++k) {
    auto two = [&](int a, int b) {  // [row a bytes 0-31 | row b bytes 0-31]
      const __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[a] + off)));
      return _mm512_mask_broadcast_i64x4(v, 0xF0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[b] + off)));
    };
    const __m512i z1 = two(k, 4 + k), z2 = two(8 + k, 12 + k);
    lo[k] = _mm512_shuffle_i64x2(z1, z2, _MM_SHUFFLE(2, 0, 2, 0));
    hi[k] = _mm512_shuffle_i64x2(z1, z2, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// p[k] lane c: 4 partial int32 sums of row 4c + k. Returns the 16 rows' sums in row order.
static inline __m512i reduce_quads(const __m512i p[4]) {
  const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

// f[k] lane c = 16 byte fields of row 4c + k -> t[m] lane c dword i = field 4m + i, byte r of it
// from row 4c + r.
static inline void transpose_fields(const __m512i f[4], __m512i t[4]) {
  const __m512i xlo = _mm512_unpacklo_epi8(f[0], f[1]), xhi = _mm512_unpackhi_epi8(f[0], f[1]);
  const __m512i ylo = _mm512_unpacklo_epi8(f[2], f[3]), yhi = _mm512_unpackhi_epi8(f[2], f[3]);
  t[0] = _mm512_unpacklo_epi16(xlo, ylo);
  t[1] = _mm512_unpackhi_epi16(xlo, ylo);
  t[2] = _mm512_unpacklo_epi16(xhi, yhi);
  t[3] = _mm512_unpackhi_epi16(xhi, yhi);
}

// Field f of the 16 rows (from transpose_fields) as int32 in row order, zero- or sign-extended.
static inline __m512i field_epi32(const __m512i t[4], int f, bool is_signed) {
  const int b = 4 * (f % 4);
  // Byte r of the field's dword to byte 0 (zero-extend) or byte 3 (sign-extend, then shift).
  const __m512i idx = is_signed ? _mm512_setr4_epi32(0x00808080 | b << 24, 0x00808080 | (b + 1) << 24,
                                                     0x00808080 | (b + 2) << 24, 0x00808080 | (b + 3) << 24)
                                : _mm512_setr4_epi32(static_cast<int>(0x80808000u) | b, static_cast<int>(0x80808000u) | (b + 1),
                                                     static_cast<int>(0x80808000u) | (b + 2), static_cast<int>(0x80808000u) | (b + 3));
  const __m512i v = _mm512_shuffle_epi8(t[f / 4], idx);
  return is_signed ? _mm512_srai_epi32(v, 24) : v;
}

// Words 0 and 1 of each lane of load_quads' z (fp16 fields at the start of a block), as floats in
// row order.
static inline void quad_head_halves(const __m512i z[4], __m512& w0, __m512& w1) {
  const __m512i a = _mm512_unpacklo_epi16(z[0], z[1]), b = _mm512_unpacklo_epi16(z[2], z[3]);
  // lane c: qword 0 = word 0 of rows 4c..4c+3, qword 1 = their word 1.
  const __m512i f = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_unpacklo_epi32(a, b));
  w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(f));
  w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f, 1));
}

// ---- K-quant / IQ4_XS scale groups of 16 rows ----------------------------------------------
// The integers are those of q4k_scale_min / iq4xs_scale / Q6_K's int8 scales and the float
// products those of block_scales, so the results are bit-identical to the scalar path.

static inline constexpr bool quad_scales(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS;
}

// Q4_K / Q5_K: the 12 packed scale bytes at bytes 4-15 of each lane (the block head) ->
// [sc0..sc7, m0..m7] (q4k_scale_min for j = 0..7).
static inline __m512i q4k_quad_fields(__m512i z) {
  const __m512i p = _mm512_shuffle_epi8(z, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m512i t = _mm512_shuffle_epi8(z, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m512i lo = _mm512_and_si512(_mm512_mask_blend_epi32(0x8888, p, _mm512_srli_epi16(p, 4)),
                                      _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15)));
  return _mm512_ternarylogic_epi32(_mm512_srli_epi16(t, 2), _mm512_set1_epi8(0x30), lo, 0xEA);  // (t >> 2 & 0x30) | lo
}

// IQ4_XS: the block head [d, scales_h, scales_l[4], ...] in each lane -> the 8 six-bit scales
// (iq4xs_scale) as bytes 0-7 (and again as 8-15).
static inline __m512i iq4xs_quad_fields(__m512i z) {
  // Word j: scales_l[j / 2] >> 4 (j % 2), and scales_h >> 2j.
  const __m512i l = _mm512_srlv_epi16(
      _mm512_shuffle_epi8(z, _mm512_broadcast_i32x4(_mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1))),
      _mm512_broadcast_i32x4(_mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)));
  const __m512i h = _mm512_srlv_epi16(
      _mm512_shuffle_epi8(z, _mm512_broadcast_i32x4(_mm_setr_epi8(2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3))),
      _mm512_broadcast_i32x4(_mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)));
  const __m512i w = _mm512_ternarylogic_epi32(l, _mm512_set1_epi16(0x0F),
                                              _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi16(3)), 4), 0xEA);
  return _mm512_packus_epi16(w, w);
}

// Decodes scale group `group` of the rows row[0..16) into sc (see GroupScales), for the
// quad_scales types.
template <GgmlType T>
static inline void load_quad_scales(const uint8_t* const row[kQuadRows], int64_t group, GroupScales<T>& sc) {
  static_assert(quad_scales(T));
  __m512i z[4], f[4], t[4];
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    load_quads(row, group * (T == GgmlType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K)), z);
    __m512 d, dmin;
    quad_head_halves(z, d, dmin);
    for (int k = 0; k < 4; ++k) f[k] = q4k_quad_fields(z[k]);
    transpose_fields(f, t);
    for (int j = 0; j < 8; ++j) {
      _mm512_store_ps(sc.s0[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(field_epi32(t, j, false))));
      _mm512_store_ps(sc.m[j], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(field_epi32(t, 8 + j, false))));
    }
  } else if constexpr (T == GgmlType::IQ4_XS) {
    load_quads(row, group * sizeof(BlockIQ4_XS), z);
    __m512 d, unused;
    quad_head_halves(z, d, unused);
    for (int k = 0; k < 4; ++k) f[k] = iq4xs_quad_fields(z[k]);
    transpose_fields(f, t);
    for (int j = 0; j < 8; ++j) {
      const __m512i ls = _mm512_sub_epi32(field_epi32(t, j, false), _mm512_set1_epi32(32));
      _mm512_store_ps(sc.s0[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls)));
    }
  } else {
    load_quads(row, group * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, scales), z);
    alignas(32) uint16_t dh[kQuadRows];
    for (int l = 0; l < kQuadRows; ++l) dh[l] = reinterpret_cast<const BlockQ6_K*>(row[l])[group].d;
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    transpose_fields(z, t);
    for (int j = 0; j < 8; ++j) {
      _mm512_store_ps(sc.s0[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(field_epi32(t, 2 * j, true))));
      _mm512_store_ps(sc.s1[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(field_epi32(t, 2 * j + 1, true))));
    }
  }
}

}  // namespace pagoda::cpu::detail
