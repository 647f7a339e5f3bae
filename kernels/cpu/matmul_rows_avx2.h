// Building blocks of the AVX2 few-rows kernels, shared by the GGML-layout kernels
// (matmul_rows_avx2.cpp) and the decode layout's (matmul_packed_avx2.cpp, which falls back to the
// GGML-layout ones for rows past its last full group); included by AVX2 translation units only.
//
// A ymm holds one 32-element block of one weight row as bytes (or, for the types with one scale
// per block, half of each of two blocks: see two_blocks); vpmaddubsw + vpmaddwd against the
// activation block give 8 partial int32 sums (4 per 16-element half), and an unpack-and-add
// tree (reduce_rows8) turns 8 such registers (8 outputs) into per-output sums. The integers are
// exactly those of accumulate_block, and the float epilogue is the same sequence, so results
// are bit-identical to the tile path and to the other ISA levels.
//
// Everything is in an anonymous namespace: each including file gets its own copies, compiled
// with its own ISA flags, so the linker can never merge one with a copy built for another ISA.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/weight_pack.h"

namespace pagoda::cpu::detail {
namespace {

constexpr int kGroup = 8;  // outputs per group: one ymm of int32/float lanes

// p[i] = partial sums of output i: lanes 0-3 over elements 0-15, lanes 4-7 over 16-31.
// Returns per-output sums of each half, lanes in output order.
inline void reduce_rows8(const __m256i p[8], __m256i& half0, __m256i& half1) {
  // Unpack-and-add rather than vphaddd: the same sums with single-uop shuffles (vphaddd is
  // several uops with a throughput of one per two cycles on Zen 3).
  __m256i t[4], u[2];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  // u[i] = [outputs 4i..4i+3, half 0 | the same, half 1].
  half0 = _mm256_permute2x128_si256(u[0], u[1], 0x20);
  half1 = _mm256_permute2x128_si256(u[0], u[1], 0x31);
}

template <GgmlType T>
constexpr int kBlocksPerGroup = blocks_per_group(T);

// Scale slots per group: one per block, and two for the one-block types (their blocks go in
// pairs, see two_blocks).
template <GgmlType T>
constexpr int kScaleSlots = std::max(kBlocksPerGroup<T>, 2);

template <GgmlType T>
struct GroupScales {
  alignas(32) float s0[kScaleSlots<T>][kGroup];
  alignas(32) float s1[kScaleSlots<T>][kGroup];
  alignas(32) float m[kScaleSlots<T>][kGroup];
  alignas(32) float m1[kScaleSlots<T>][kGroup];
};

// ---- K-quant / IQ4_XS scale groups of 8 rows: the "row duo" layout ---------------------------
// Lane c of register k (k = 0..3) holds 16 bytes of row 4c + k: the per-type field decoding runs
// on 2 rows at once with in-lane shuffles, and 8 unpacks (transpose_fields) turn rows into lanes,
// rather than a 16x16 transpose of one row per xmm. The integers and float products are those of
// block_scales, so results are bit-identical.

// 16 bytes at row[l] + off: z[k] = [row k | row 4 + k].
inline void load_duos(const uint8_t* const row[kGroup], size_t off, __m256i z[4]) {
  for (int k = 0; k < 4; ++k)
    z[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[k] + off))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[4 + k] + off)), 1);
}

// f[k] lane c = 16 byte fields of row 4c + k -> t[m] lane c dword i = field 4m + i, byte r of it
// from row 4c + r.
inline void transpose_fields(const __m256i f[4], __m256i t[4]) {
  const __m256i xlo = _mm256_unpacklo_epi8(f[0], f[1]), xhi = _mm256_unpackhi_epi8(f[0], f[1]);
  const __m256i ylo = _mm256_unpacklo_epi8(f[2], f[3]), yhi = _mm256_unpackhi_epi8(f[2], f[3]);
  t[0] = _mm256_unpacklo_epi16(xlo, ylo);
  t[1] = _mm256_unpackhi_epi16(xlo, ylo);
  t[2] = _mm256_unpacklo_epi16(xhi, yhi);
  t[3] = _mm256_unpackhi_epi16(xhi, yhi);
}

// Field f of the 8 rows as floats in row order, from zero- or sign-extended bytes. (f is a
// template argument so that the shuffle control is a constant.)
template <int f, bool is_signed>
inline __m256 field_ps(const __m256i t[4]) {
  constexpr int b = 4 * (f % 4);
  constexpr int fill = is_signed ? 0x00808080 : static_cast<int>(0x80808000u);
  constexpr int shift = is_signed ? 24 : 0;
  const __m256i idx = _mm256_setr_epi32(fill | b << shift, fill | (b + 1) << shift, fill | (b + 2) << shift, fill | (b + 3) << shift,
                                        fill | b << shift, fill | (b + 1) << shift, fill | (b + 2) << shift, fill | (b + 3) << shift);
  const __m256i v = _mm256_shuffle_epi8(t[f / 4], idx);
  return _mm256_cvtepi32_ps(is_signed ? _mm256_srai_epi32(v, 24) : v);
}

// fp16 scale at byte `off` of each of the 8 rows, as floats in row order.
inline __m256 row_halves(const uint8_t* const row[kGroup], size_t off) {
  uint16_t h[kGroup];
  for (int l = 0; l < kGroup; ++l) std::memcpy(&h[l], row[l] + off, 2);
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]),
                                        static_cast<short>(h[3]), static_cast<short>(h[4]), static_cast<short>(h[5]),
                                        static_cast<short>(h[6]), static_cast<short>(h[7])));
}

// Words 0 and 1 of each row's 16 bytes (load_duos), as floats in row order.
inline void duo_head_halves(const __m256i z[4], __m256& w0, __m256& w1) {
  const __m256i a = _mm256_unpacklo_epi16(z[0], z[1]), b = _mm256_unpacklo_epi16(z[2], z[3]);
  // lane c: qword 0 = word 0 of rows 4c..4c+3, qword 1 = their word 1.
  const __m256i f = _mm256_permute4x64_epi64(_mm256_unpacklo_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
  w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(f));
  w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(f, 1));
}

// Q4_K / Q5_K: the 12 packed scale bytes at bytes 4-15 of each lane -> [sc0..sc7, m0..m7].
inline __m256i q4k_duo_fields(__m256i z) {
  const __m256i p = _mm256_shuffle_epi8(z, _mm256_broadcastsi128_si256(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m256i t = _mm256_shuffle_epi8(z, _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m256i lo = _mm256_and_si256(_mm256_blend_epi32(p, _mm256_srli_epi16(p, 4), 0x88),
                                      _mm256_broadcastsi128_si256(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15)));
  return _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(t, 2), _mm256_set1_epi8(0x30)));
}

// IQ4_XS: bytes 2-7 of each lane (scales_h, scales_l) -> the 8 six-bit scales (iq4xs_scale) as
// bytes 0-7. Word j of each lane gets scales_l[j / 2] and scales_h, shifted per word with
// multiplies (a left shift by vpmullw, a right shift by vpmulhuw) as AVX2 has no per-word shift.
inline __m256i iq4xs_duo_fields(__m256i z) {
  const __m256i l = _mm256_shuffle_epi8(z, _mm256_broadcastsi128_si256(_mm_setr_epi8(4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1)));
  const __m256i lo = _mm256_and_si256(_mm256_blend_epi16(l, _mm256_mulhi_epu16(l, _mm256_set1_epi16(1 << 12)), 0xAA),
                                      _mm256_set1_epi16(0x0F));
  // (scales_h >> 2j & 3) << 4 = (scales_h >> (2j - 4)) & 0x30: a left shift for j < 3.
  const __m256i h = _mm256_shuffle_epi8(z, _mm256_set1_epi16(0x0302));
  const __m256i left = _mm256_mullo_epi16(h, _mm256_setr_epi16(16, 4, 1, 0, 0, 0, 0, 0, 16, 4, 1, 0, 0, 0, 0, 0));
  const __m256i right = _mm256_mulhi_epu16(h, _mm256_setr_epi16(0, 0, 0, 1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 0, 0, 0, 1 << 14,
                                                                 1 << 12, 1 << 10, 1 << 8, 1 << 6));
  const __m256i hi = _mm256_and_si256(_mm256_blend_epi16(left, right, 0xF8), _mm256_set1_epi16(0x30));
  return _mm256_packus_epi16(_mm256_or_si256(lo, hi), _mm256_setzero_si256());
}

// Group scales from the transposed fields t (transpose_fields) and the fp16 super-block scales
// d / dmin in row order.
template <GgmlType T>
inline void store_fields(const __m256i t[4], __m256 d, __m256 dmin, GroupScales<T>& sc) {
  [&]<int... J>(std::integer_sequence<int, J...>) {
    ([&] {
      constexpr int j = J;
      if constexpr (T == GgmlType::Q6_K || T == GgmlType::Q3_K || T == GgmlType::Q2_K) {
        // 16 sub-block fields (signed: Q6_K's int8 scales, Q3_K's sc - 32).
        constexpr bool is_signed = T != GgmlType::Q2_K;
        _mm256_store_ps(sc.s0[j], _mm256_mul_ps(d, field_ps<2 * j, is_signed>(t)));
        _mm256_store_ps(sc.s1[j], _mm256_mul_ps(d, field_ps<2 * j + 1, is_signed>(t)));
      } else if constexpr (T == GgmlType::IQ4_XS) {
        _mm256_store_ps(sc.s0[j], _mm256_mul_ps(d, _mm256_sub_ps(field_ps<j, false>(t), _mm256_set1_ps(32.f))));
      } else {
        _mm256_store_ps(sc.s0[j], _mm256_mul_ps(d, field_ps<j, false>(t)));
        _mm256_store_ps(sc.m[j], _mm256_mul_ps(dmin, field_ps<8 + j, false>(t)));
      }
    }(), ...);
  }(std::make_integer_sequence<int, 8>{});
}

// The same from the per-type 16-byte fields f[k] of rows k and 4 + k (duo layout).
template <GgmlType T>
inline void store_group_scales(const __m256i f[4], __m256 d, __m256 dmin, GroupScales<T>& sc) {
  __m256i t[4];
  transpose_fields(f, t);
  store_fields<T>(t, d, dmin, sc);
}

// Q4_K / Q5_K / IQ4_XS: group scales from z[k] = [16 bytes from the header of row k | of row
// 4 + k].
template <GgmlType T>
inline void duo_header_scales(const __m256i z[4], GroupScales<T>& sc) {
  __m256i f[4];
  __m256 d, dmin;
  duo_head_halves(z, d, dmin);
  for (int k = 0; k < 4; ++k) f[k] = T == GgmlType::IQ4_XS ? iq4xs_duo_fields(z[k]) : q4k_duo_fields(z[k]);
  store_group_scales<T>(f, d, dmin, sc);
}

// Q3_K: bytes 2-13 of each lane (the block's 12 scale bytes) -> the 16 six-bit scales
// (q3k_scale) as bytes 0-15. Low 4 bits: scales[s % 8], its high nibble for s >= 8; top 2 bits:
// bits 2 (s / 4).. of scales[8 + s % 4], shifted per dword (s / 4 is the dword of byte s).
inline __m256i q3k_duo_fields(__m256i z) {
  const __m256i a = _mm256_shuffle_epi8(z, _mm256_broadcastsi128_si256(_mm_setr_epi8(2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9)));
  const __m256i lo = _mm256_and_si256(_mm256_blend_epi32(a, _mm256_srli_epi16(a, 4), 0xCC), _mm256_set1_epi8(0x0F));
  const __m256i h = _mm256_shuffle_epi8(z, _mm256_broadcastsi128_si256(_mm_setr_epi8(10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13)));
  const __m256i top = _mm256_and_si256(_mm256_srlv_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi8(0x03));
  return _mm256_or_si256(lo, _mm256_slli_epi16(top, 4));
}

template <GgmlType T>
void load_scales(const uint8_t* const row[kGroup], int64_t group, GroupScales<T>& sc) {
  if constexpr (T == GgmlType::Q2_K) {
    // The 16 scale bytes: sub-block s's scale in the low nibble, its min in the high one.
    __m256i f[4], lo[4], hi[4], t[4];
    load_duos(row, group * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, scales), f);
    for (int k = 0; k < 4; ++k) {
      lo[k] = _mm256_and_si256(f[k], _mm256_set1_epi8(0x0F));
      hi[k] = _mm256_and_si256(_mm256_srli_epi16(f[k], 4), _mm256_set1_epi8(0x0F));
    }
    const __m256 d = row_halves(row, group * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, d));
    const __m256 dmin = row_halves(row, group * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, dmin));
    transpose_fields(lo, t);
    store_fields<T>(t, d, d, sc);
    transpose_fields(hi, t);
    [&]<int... J>(std::integer_sequence<int, J...>) {
      ((_mm256_store_ps(sc.m[J], _mm256_mul_ps(dmin, field_ps<2 * J, false>(t))),
        _mm256_store_ps(sc.m1[J], _mm256_mul_ps(dmin, field_ps<2 * J + 1, false>(t)))), ...);
    }(std::make_integer_sequence<int, 8>{});
  } else if constexpr (T == GgmlType::Q3_K) {
    // 16 bytes ending with d: the 12 scale bytes at 2-13 (a load from the scales themselves
    // would read past the last block of the matrix).
    __m256i z[4], f[4];
    load_duos(row, group * sizeof(BlockQ3_K) + offsetof(BlockQ3_K, scales) - 2, z);
    for (int k = 0; k < 4; ++k) f[k] = _mm256_sub_epi8(q3k_duo_fields(z[k]), _mm256_set1_epi8(32));  // sc - 32
    const __m256 d = row_halves(row, group * sizeof(BlockQ3_K) + offsetof(BlockQ3_K, d));
    store_group_scales<T>(f, d, d, sc);
  } else if constexpr (T == GgmlType::Q6_K) {
    __m256i f[4];
    load_duos(row, group * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, scales), f);
    const __m256 d = row_halves(row, group * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, d));
    store_group_scales<T>(f, d, d, sc);
  } else if constexpr (vector_group_scales(T)) {
    __m256i z[4];
    constexpr size_t bytes = T == GgmlType::Q4_K ? sizeof(BlockQ4_K) : T == GgmlType::Q5_K ? sizeof(BlockQ5_K) : sizeof(BlockIQ4_XS);
    load_duos(row, group * bytes, z);
    duo_header_scales<T>(z, sc);
  } else if constexpr (generic_unpack(T)) {
    for (int l = 0; l < kGroup; ++l) group_scales<T>(row[l], group, &sc.s0[0][l], &sc.s1[0][l], &sc.m[0][l], &sc.m1[0][l], kGroup);
  } else {
    static_assert(T == GgmlType::Q8_0 || T == GgmlType::Q4_0);
    _mm256_store_ps(sc.s0[0], row_halves(row, group * (T == GgmlType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0))));
  }
}

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Partial sums (8 x int32) of block j of scale group `group` of one weight row against the
// activation block xv: sum(u * x) for the u8 types, sum(q * x) for Q8_0 (see Dot4 in
// matmul_avx2.cpp for the saturation argument).
template <GgmlType T, int j>
inline __m256i block_dot(const uint8_t* row, int64_t group, __m256i xv) {
  const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
  __m256i u;
  if constexpr (generic_unpack(T)) {
    u = unpack_block<T>(row, group * kBlocksPerGroup<T> + j);
    if constexpr (signed_weights(T)) {
      const __m256i q = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
      return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xv, q)), ones);
    }
  } else if constexpr (T == GgmlType::Q8_0) {
    const __m256i q = load32(row + group * sizeof(BlockQ8_0) + 2);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xv, q)), ones);
  } else if constexpr (T == GgmlType::Q4_0) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + group * sizeof(BlockQ4_0) + 2));
    u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
  } else if constexpr (T == GgmlType::Q4_K) {
    const __m256i v = load32(row + group * sizeof(BlockQ4_K) + offsetof(BlockQ4_K, qs) + 32 * (j / 2));
    u = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
  } else {
    const int h = j / 4, p = j % 4;
    const uint8_t* base = row + group * sizeof(BlockQ6_K);
    const __m256i ql = load32(base + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (p & 1));
    const __m256i qh = load32(base + offsetof(BlockQ6_K, qh) + 32 * h);
    const __m256i lo = _mm256_and_si256(p >> 1 ? _mm256_srli_epi16(ql, 4) : ql, m4);
    // Bits 2p, 2p + 1 of each qh byte straight to bits 4-5 (a 16-bit shift by at most 4 keeps
    // them within their byte).
    const __m256i hbits = p < 2 ? _mm256_slli_epi16(qh, 4 - 2 * p) : _mm256_srli_epi16(qh, 2 * p - 4);
    u = _mm256_or_si256(lo, _mm256_and_si256(hbits, _mm256_set1_epi8(0x30)));
  }
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones);
}

// ---- Two blocks per reduction ----------------------------------------------------------------
// For the types with one scale per 32-element block (no 16-element halves), only each row's
// whole-block sum is needed, so a register can carry two blocks: lanes 0-3 partial sums of
// block b and lanes 4-7 of block b + 1. One reduce_rows8 then serves two blocks (its half0 /
// half1 outputs become the two blocks' sums), which halves the cross-lane work that dominated
// the one-block layout on AVX2, and the 4-bit types unpack without a 128-bit insert: their
// nibble layouts already put "elements 0-15 of two blocks" in one 32-byte span or two 16-byte
// ones. The activations are arranged the same way (xa = elements 0-15 of both blocks, xb =
// 16-31). The integer sums are the same exact integers, the float epilogue the same sequence.

template <GgmlType T>
constexpr bool kPairedBlocks = T == GgmlType::Q4_0 || T == GgmlType::Q4_K ||
                               T == GgmlType::Q5_K || T == GgmlType::IQ4_XS;

inline __m256i load16x2(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(hi), reinterpret_cast<const __m128i*>(lo));
}
inline __m256i broadcast16(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// sum(u * x) over two unsigned-weight halves (ua against xa, ub against xb) as 8 int32 partials.
// The int16 add cannot overflow: u <= 31 here, so each vpmaddubsw word is at most 2 * 31 * 127.
inline __m256i dot_u8_pair(__m256i ua, __m256i xa, __m256i ub, __m256i xb) {
  return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(ua, xa), _mm256_maddubs_epi16(ub, xb)),
                           _mm256_set1_epi16(1));
}
// sum(q * x) for signed weights q (|q| * sign(x, q), see Dot4 in matmul_avx2.cpp); words can
// reach 2 * 127 * 127, so each half is widened before the add.
inline __m256i dot_s8(__m256i q, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q)), _mm256_set1_epi16(1));
}

// Blocks j and j + 1 of scale group `group` of one row (for Q4_0: blocks `group` and
// group + 1, j = 0): lanes 0-3 partial sums of the first, 4-7 of the second. sum(u * x) for the
// unsigned types, sum(q * x) for the signed ones (as block_dot).
template <GgmlType T, int j>
inline __m256i pair_dot(const uint8_t* row, int64_t group, __m256i xa, __m256i xb) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q4_0) {
    const uint8_t* q = row + group * sizeof(BlockQ4_0) + offsetof(BlockQ4_0, qs);
    const __m256i v = load16x2(q, q + sizeof(BlockQ4_0));
    return dot_u8_pair(_mm256_and_si256(v, m4), xa, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), xb);
  } else if constexpr (T == GgmlType::IQ4_XS) {
    // 32 bytes of indices: block j's 16 in the low half, block j + 1's in the high half.
    const __m256i v = load32(row + group * sizeof(BlockIQ4_XS) + offsetof(BlockIQ4_XS, qs) + 16 * j);
    const __m256i levels = _mm256_xor_si256(_mm256_broadcastsi128_si256(unpack_iq4_table()), _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i qa = _mm256_shuffle_epi8(levels, _mm256_and_si256(v, m4));
    const __m256i qb = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    return _mm256_add_epi32(dot_s8(qa, xa), dot_s8(qb, xb));
  } else {
    static_assert(T == GgmlType::Q4_K || T == GgmlType::Q5_K);
    // Blocks j and j + 1 are the low and high nibbles of the same 32 bytes: each 16-byte half
    // goes to both lanes, shifted by 0 in lane 0 and 4 in lane 1.
    using Block = std::conditional_t<T == GgmlType::Q4_K, BlockQ4_K, BlockQ5_K>;
    const uint8_t* q = row + group * sizeof(Block) + offsetof(Block, qs) + 16 * j;
    const __m256i nib = _mm256_setr_epi64x(0, 0, 4, 4);
    __m256i ua = _mm256_and_si256(_mm256_srlv_epi64(broadcast16(q), nib), m4);
    __m256i ub = _mm256_and_si256(_mm256_srlv_epi64(broadcast16(q + 16), nib), m4);
    if constexpr (T == GgmlType::Q5_K) {
      // Bit j of qh byte e is the fifth bit of element e of block j: bits j (lane 0) and j + 1
      // (lane 1) moved to bit 4 of their byte (a 64-bit shift never brings in another byte's
      // bit 4 here: the shift is at most 4 either way).
      const uint8_t* qh = row + group * sizeof(BlockQ5_K) + offsetof(BlockQ5_K, qh);
      const __m256i fifth = _mm256_set1_epi8(0x10);
      auto to_bit4 = [](__m256i h) {
        if constexpr (j < 4) return _mm256_sllv_epi64(h, _mm256_setr_epi64x(4 - j, 4 - j, 3 - j, 3 - j));
        else return _mm256_srlv_epi64(h, _mm256_setr_epi64x(j - 4, j - 4, j - 3, j - 3));
      };
      ua = _mm256_or_si256(ua, _mm256_and_si256(to_bit4(broadcast16(qh)), fifth));
      ub = _mm256_or_si256(ub, _mm256_and_si256(to_bit4(broadcast16(qh + 16)), fifth));
    }
    return dot_u8_pair(ua, xa, ub, xb);
  }
}

// The activation rows of one few_rows / packed_rows call: int8 blocks, scales and half sums, and
// per block what the epilogue derives from the sums, made once per call by run_matmul
// (QuantActs): fsum = float(xs0 + xs1) (affine types) or float(xs_h) per half (Q2_K), and corr =
// offset * (xs0 + xs1), or offset * xs_h per half for the half-scale types (types with an offset).
struct ActRowPtrs {
  const int8_t* q;
  const float* d;
  const int16_t* s;
  const float* fsum;
  const int32_t* corr;
};
inline ActRowPtrs act_row(const MatmulArgs& a, int64_t i) {
  return {a.acts.row_q(i), a.acts.row_d(i), a.acts.row_s(i), a.acts.row_fsum(i), a.acts.row_corr(i)};
}

// acc += one block's contribution for 8 outputs from its integer sums (isum_h: half h, or the
// whole block in isum_h0 with isum_h1 zero for the types without half scales), in
// accumulate_block's order. b is the block index in the row, j its index in the scale group.
template <GgmlType T>
inline __m256 block_epilogue(__m256 acc, __m256i sum0, __m256i sum1, const GroupScales<T>& sc, int j,
                             const ActRowPtrs& x, int64_t b) {
  const __m256 dx = _mm256_set1_ps(x.d[b]);
  const __m256 s0 = _mm256_load_ps(sc.s0[j]);
  // Signed-weight sums are sum(q * x) already; the others need -offset * sum(x).
  constexpr int off = signed_weights(T) ? 0 : weight_offset(T);
  if constexpr (half_scales(T)) {
    __m256i i0s = sum0, i1s = sum1;
    if constexpr (off != 0) {
      i0s = _mm256_sub_epi32(i0s, _mm256_set1_epi32(x.corr[2 * b]));
      i1s = _mm256_sub_epi32(i1s, _mm256_set1_epi32(x.corr[2 * b + 1]));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0s), _mm256_mul_ps(s0, dx), acc);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1s), _mm256_mul_ps(_mm256_load_ps(sc.s1[j]), dx), acc);
    if constexpr (half_mins(T)) {
      acc = _mm256_fnmadd_ps(_mm256_set1_ps(x.fsum[2 * b]), _mm256_mul_ps(_mm256_load_ps(sc.m[j]), dx), acc);
      acc = _mm256_fnmadd_ps(_mm256_set1_ps(x.fsum[2 * b + 1]), _mm256_mul_ps(_mm256_load_ps(sc.m1[j]), dx), acc);
    }
  } else {
    __m256i isum = _mm256_add_epi32(sum0, sum1);
    if constexpr (has_block_correction(T)) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(x.corr[b]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(s0, dx), acc);
    if constexpr (block_min(T)) acc = _mm256_fnmadd_ps(_mm256_set1_ps(x.fsum[b]), _mm256_mul_ps(_mm256_load_ps(sc.m[j]), dx), acc);
  }
  return acc;
}

// Block j of scale group g (block b of the row) for R activation rows, one block per reduction.
template <GgmlType T, int R, int j>
inline void one_block(const uint8_t* const row[kGroup], const ActRowPtrs x[R], const GroupScales<T>& sc, int64_t g,
                      int64_t b, __m256 acc[R]) {
  for (int r = 0; r < R; ++r) {
    const __m256i xv = load32(reinterpret_cast<const uint8_t*>(x[r].q + 32 * b));
    __m256i p[8], h0, h1;
    for (int i = 0; i < 8; ++i) p[i] = block_dot<T, j>(row[i], g, xv);
    reduce_rows8(p, h0, h1);
    if constexpr (half_scales(T)) acc[r] = block_epilogue<T>(acc[r], h0, h1, sc, j, x[r], b);
    else acc[r] = block_epilogue<T>(acc[r], _mm256_add_epi32(h0, h1), _mm256_setzero_si256(), sc, j, x[r], b);
  }
}

// Blocks b and b + 1 (j and j + 1 of scale group g; for Q4_0 g = b, j = 0, and sc holds
// block b's scales in s0[0] and b + 1's in s0[1]) for R activation rows, one reduction.
template <GgmlType T, int R, int j>
inline void two_blocks(const uint8_t* const row[kGroup], const ActRowPtrs x[R], const GroupScales<T>& sc, int64_t g,
                       int64_t b, __m256 acc[R]) {
  constexpr int js = blocks_per_group(T) == 1 ? 1 : 0;  // scale index step for one-block groups
  for (int r = 0; r < R; ++r) {
    const __m256i x0 = load32(reinterpret_cast<const uint8_t*>(x[r].q + 32 * b));
    const __m256i x1 = load32(reinterpret_cast<const uint8_t*>(x[r].q + 32 * b + 32));
    const __m256i xa = _mm256_permute2x128_si256(x0, x1, 0x20), xb = _mm256_permute2x128_si256(x0, x1, 0x31);
    __m256i p[8], first, second;
    for (int i = 0; i < 8; ++i) p[i] = pair_dot<T, j>(row[i], g, xa, xb);
    reduce_rows8(p, first, second);
    const __m256i zero = _mm256_setzero_si256();
    acc[r] = block_epilogue<T>(acc[r], first, zero, sc, js ? 0 : j, x[r], b);
    acc[r] = block_epilogue<T>(acc[r], second, zero, sc, js ? 1 : j + 1, x[r], b + 1);
  }
}

// Q4_0: the fp16 scales of blocks b and b + 1 (at byte offsets off and off + 18) of the 8 rows
// into sc.s0[0] and sc.s0[1]: one 2 x 16-byte load per row and a word transpose, rather than
// 16 scalar inserts.
template <GgmlType T>
inline void pair_scales(const uint8_t* const row[kGroup], size_t off, GroupScales<T>& sc) {
  static_assert(T == GgmlType::Q4_0);
  __m256i v[kGroup];
  for (int l = 0; l < kGroup; ++l) v[l] = load16x2(row[l] + off, row[l] + off + sizeof(BlockQ4_0));  // word 0 of each lane
  __m256i w[4], q[2];
  for (int i = 0; i < 4; ++i) w[i] = _mm256_unpacklo_epi16(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 2; ++i) q[i] = _mm256_unpacklo_epi32(w[2 * i], w[2 * i + 1]);
  const __m256i h = _mm256_unpacklo_epi64(q[0], q[1]);  // lane 0: block b, rows 0-7; lane 1: block b + 1
  _mm256_store_ps(sc.s0[0], _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
  _mm256_store_ps(sc.s0[1], _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}

// Prefetches lines [per_group * g, per_group * (g + 1)) of the next rows (capped at `lines`):
// the next group of rows is spread over this group's scale groups without a division per step.
inline void prefetch_share(const uint8_t* prefetch, int64_t lines, int64_t per_group, int64_t g) {
  const int64_t end = std::min(lines, per_group * (g + 1));
  for (int64_t l = per_group * g; l < end; ++l) _mm_prefetch(reinterpret_cast<const char*>(prefetch + 64 * l), _MM_HINT_T1);
}

// R activation rows (i0..) x outputs [o0, o0 + valid), valid <= 8, over all of k.
// `prefetch_lines` cache lines from `prefetch` (the next group's rows) are prefetched into L2,
// spread over the scale groups (see few_rows_range in matmul_rows_avx512.cpp for why).
template <GgmlType T, int R>
void few_rows(const MatmulArgs& a, int64_t o0, int valid, int64_t i0, const uint8_t* prefetch, int64_t prefetch_lines) {
  constexpr int bpg = kBlocksPerGroup<T>;
  const uint8_t* row[kGroup];
  for (int l = 0; l < kGroup; ++l) row[l] = a.w + (o0 + std::min(l, valid - 1)) * a.row_bytes;
  ActRowPtrs x[R];
  for (int r = 0; r < R; ++r) x[r] = act_row(a, i0 + r);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t groups = a.k / (32 * bpg);
  GroupScales<T> sc;
  if constexpr (bpg == 1 && kPairedBlocks<T>) {
    // Q4_0: blocks in pairs (the scales straight from the block headers), an odd last block
    // alone.
    constexpr size_t bsz = sizeof(BlockQ4_0);
    const int64_t steps = (groups + 1) / 2, per_step = (prefetch_lines + steps - 1) / std::max<int64_t>(steps, 1);
    for (int64_t b = 0; b < groups; b += 2) {
      prefetch_share(prefetch, prefetch_lines, per_step, b / 2);
      if (b + 1 < groups) {
        pair_scales<T>(row, b * bsz, sc);
        two_blocks<T, R, 0>(row, x, sc, b, b, acc);
      } else {
        load_scales<T>(row, b, sc);
        one_block<T, R, 0>(row, x, sc, b, b, acc);
      }
    }
  } else {
    const int64_t per_group = (prefetch_lines + groups - 1) / std::max<int64_t>(groups, 1);
    for (int64_t g = 0; g < groups; ++g) {
      prefetch_share(prefetch, prefetch_lines, per_group, g);
      load_scales<T>(row, g, sc);
      if constexpr (kPairedBlocks<T>) {
        static_assert(bpg % 2 == 0);
        [&]<int... P>(std::integer_sequence<int, P...>) {
          (two_blocks<T, R, 2 * P>(row, x, sc, g, g * bpg + 2 * P, acc), ...);
        }(std::make_integer_sequence<int, bpg / 2>{});
      } else {
        [&]<int... J>(std::integer_sequence<int, J...>) {
          (one_block<T, R, J>(row, x, sc, g, g * bpg + J, acc), ...);
        }(std::make_integer_sequence<int, bpg>{});
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(32) float tmp[kGroup];
    _mm256_store_ps(tmp, acc[r]);
    std::memcpy(a.out + (i0 + r) * a.out_features + o0, tmp, sizeof(float) * valid);
  }
}

template <GgmlType T>
void few_rows_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kGroup) {
    const int valid = static_cast<int>(std::min<int64_t>(kGroup, o_end - o0));
    const int64_t next_rows = std::min<int64_t>(kGroup, std::max<int64_t>(0, o_end - o0 - kGroup));
    const uint8_t* next = a.w + (o0 + kGroup) * a.row_bytes;
    const int64_t lines = next_rows * static_cast<int64_t>(a.row_bytes) / 64;
    for (int64_t i0 = 0; i0 < a.n; i0 += 2) {
      const int64_t pl = i0 == 0 ? lines : 0;
      if (a.n - i0 >= 2) few_rows<T, 2>(a, o0, valid, i0, next, pl);
      else few_rows<T, 1>(a, o0, valid, i0, next, pl);
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu::detail
