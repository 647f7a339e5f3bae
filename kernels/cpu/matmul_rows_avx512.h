// Building blocks of the AVX-512 few-rows kernels (matmul_rows_avx512.cpp and
// matmul_rows_kquants_avx512.cpp; included by AVX-512 translation units only, everything static
// inline for the reason matmul_internal.h gives).
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

namespace pagoda::cpu::detail {

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

}  // namespace pagoda::cpu::detail
