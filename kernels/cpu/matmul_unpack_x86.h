// AVX2 unpacking of one 32-element weight block to the unsigned bytes u of decode_block32
// (matmul_internal.h) for the types that share the generic kernels: Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q5_K, IQ4_NL, IQ4_XS. Included by the AVX2 and the AVX-512 kernel files only (both are
// compiled with AVX2 available); everything is static inline for the reason matmul_internal.h
// gives.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_internal.h"

namespace pagoda::cpu::detail {

static inline __m256i unpack_load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Right shift of every byte by n (0..7): a 16-bit shift whose spill-over the caller masks off.
static inline __m256i unpack_srl(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

// 16 bytes of 4-bit indices -> 32 bytes: low nibbles are elements 0..15, high nibbles 16..31.
static inline __m256i unpack_nibbles16(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// Bit i of the little-endian 32-bit mask at qh, as 0x10 in byte i (Q5_0/Q5_1's fifth bit).
static inline __m256i unpack_fifth_bits(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// IQ4 level index -> level + 128 (the u of IQ4_NL / IQ4_XS): kIq4nlValues[i] + 128 as bytes.
static inline __m128i unpack_iq4_table() {
  return _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
                       static_cast<char>(153), static_cast<char>(166), static_cast<char>(181), static_cast<char>(197),
                       static_cast<char>(217), static_cast<char>(241));
}
static inline __m256i unpack_iq4_levels(__m256i idx) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(unpack_iq4_table()), idx);
}

// The types unpack_block covers (the others have hand-written paths in the kernel files).
static inline constexpr bool generic_unpack(GgmlType t) {
  return t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::Q2_K ||
         t == GgmlType::Q3_K || t == GgmlType::Q5_K || t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS;
}

// u of block b (in units of 32 elements) of a weight row of type T.
template <GgmlType T>
static inline __m256i unpack_block(const uint8_t* row, int64_t b) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int j = static_cast<int>(b % 8);
  if constexpr (T == GgmlType::Q4_1) {
    return unpack_nibbles16(row + b * sizeof(BlockQ4_1) + offsetof(BlockQ4_1, qs));
  } else if constexpr (T == GgmlType::Q5_0) {
    const uint8_t* blk = row + b * sizeof(BlockQ5_0);
    return _mm256_or_si256(unpack_nibbles16(blk + offsetof(BlockQ5_0, qs)), unpack_fifth_bits(blk + offsetof(BlockQ5_0, qh)));
  } else if constexpr (T == GgmlType::Q5_1) {
    const uint8_t* blk = row + b * sizeof(BlockQ5_1);
    return _mm256_or_si256(unpack_nibbles16(blk + offsetof(BlockQ5_1, qs)), unpack_fifth_bits(blk + offsetof(BlockQ5_1, qh)));
  } else if constexpr (T == GgmlType::IQ4_NL) {
    return unpack_iq4_levels(unpack_nibbles16(row + b * sizeof(BlockIQ4_NL) + offsetof(BlockIQ4_NL, qs)));
  } else if constexpr (T == GgmlType::IQ4_XS) {
    return unpack_iq4_levels(unpack_nibbles16(row + (b / 8) * sizeof(BlockIQ4_XS) + offsetof(BlockIQ4_XS, qs) + 16 * j));
  } else if constexpr (T == GgmlType::Q2_K) {
    const __m256i qs = unpack_load32(row + (b / 8) * sizeof(BlockQ2_K) + offsetof(BlockQ2_K, qs) + 32 * (j / 4));
    return _mm256_and_si256(unpack_srl(qs, 2 * (j % 4)), _mm256_set1_epi8(3));
  } else if constexpr (T == GgmlType::Q3_K) {
    const uint8_t* blk = row + (b / 8) * sizeof(BlockQ3_K);
    const __m256i qs = unpack_load32(blk + offsetof(BlockQ3_K, qs) + 32 * (j / 4));
    const __m256i hm = unpack_load32(blk + offsetof(BlockQ3_K, hmask));
    const __m256i lo = _mm256_and_si256(unpack_srl(qs, 2 * (j % 4)), _mm256_set1_epi8(3));
    const __m256i hi = _mm256_and_si256(unpack_srl(hm, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
  } else {
    static_assert(T == GgmlType::Q5_K, "unpack_block: not a generic-kernel type");
    const uint8_t* blk = row + (b / 8) * sizeof(BlockQ5_K);
    const __m256i qs = unpack_load32(blk + offsetof(BlockQ5_K, qs) + 32 * (j / 2));
    const __m256i qh = unpack_load32(blk + offsetof(BlockQ5_K, qh));
    const __m256i lo = _mm256_and_si256(unpack_srl(qs, 4 * (j % 2)), m4);
    const __m256i hi = _mm256_and_si256(unpack_srl(qh, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
}

// Scales of scale group `group` (blocks_per_group(T) blocks) of one weight row: block j's
// block_scales go to s0[j * stride] etc. The same floats as block_scales, with Q5_K's and
// IQ4_XS's fp16 super-block fields converted once per group rather than once per block.
template <GgmlType T>
static inline void group_scales(const uint8_t* row, int64_t group, float* s0, float* s1, float* m0, float* m1,
                                size_t stride) {
  if constexpr (T == GgmlType::Q5_K) {
    const BlockQ5_K* blk = reinterpret_cast<const BlockQ5_K*>(row) + group;
    const float d = _cvtsh_ss(blk->d), dmin = _cvtsh_ss(blk->dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      q4k_scale_min(j, blk->scales, sc, mn);
      s0[j * stride] = s1[j * stride] = d * static_cast<float>(sc);
      m0[j * stride] = m1[j * stride] = dmin * static_cast<float>(mn);
    }
  } else if constexpr (T == GgmlType::IQ4_XS) {
    const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(row) + group;
    const float d = _cvtsh_ss(blk->d);
    for (int j = 0; j < 8; ++j) s0[j * stride] = s1[j * stride] = d * static_cast<float>(iq4xs_scale(j, *blk) - 32);
  } else {
    for (int j = 0; j < blocks_per_group(T); ++j) {
      const BlockScales bs = block_scales(T, row, group * blocks_per_group(T) + j);
      s0[j * stride] = bs.s0, s1[j * stride] = bs.s1, m0[j * stride] = bs.m0, m1[j * stride] = bs.m1;
    }
  }
}

// ---- Scale groups of several rows at once (the few-rows kernels) --------------------------
//
// The few-rows kernels need a K-quant super-block's sub-block scales as [sub-block][row] floats,
// 8 or 16 rows at a time. Unpacking them one (row, sub-block) at a time with scalar code cost
// more than the dot products themselves (decode of the 4- and 5-bit types was compute-bound);
// instead each row's packed scales become 16 bytes with SIMD shuffles, a 16x16 byte transpose
// turns rows into lanes, and the kernel converts each field to floats for all rows at once. The
// integers are those of q4k_scale_min / iq4xs_scale / Q6_K's int8 scales, so the floats are
// bit-identical to block_scales'.

// The types group_scale_bytes handles.
static inline constexpr bool vector_group_scales(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS;
}

// out[f] = byte f of in[0..15], i.e. out[f] byte r = in[r] byte f.
static inline void transpose_16x16_u8(const __m128i in[16], __m128i out[16]) {
  __m128i a[16], b[16];
  for (int p = 0; p < 8; ++p) {  // row pairs: bytes 0-7 / 8-15 of rows 2p, 2p+1 interleaved
    a[2 * p] = _mm_unpacklo_epi8(in[2 * p], in[2 * p + 1]);
    a[2 * p + 1] = _mm_unpackhi_epi8(in[2 * p], in[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q)  // row quads: b[4q + k] holds bytes 4k..4k+3 of rows 4q..4q+3
    for (int h = 0; h < 2; ++h) {
      b[4 * q + 2 * h] = _mm_unpacklo_epi16(a[4 * q + h], a[4 * q + 2 + h]);
      b[4 * q + 2 * h + 1] = _mm_unpackhi_epi16(a[4 * q + h], a[4 * q + 2 + h]);
    }
  for (int o = 0; o < 2; ++o)  // row octets: a[8o + m] holds bytes 2m, 2m+1 of rows 8o..8o+7
    for (int k = 0; k < 4; ++k) {
      a[8 * o + 2 * k] = _mm_unpacklo_epi32(b[8 * o + k], b[8 * o + 4 + k]);
      a[8 * o + 2 * k + 1] = _mm_unpackhi_epi32(b[8 * o + k], b[8 * o + 4 + k]);
    }
  for (int m = 0; m < 8; ++m) {
    out[2 * m] = _mm_unpacklo_epi64(a[m], a[8 + m]);
    out[2 * m + 1] = _mm_unpackhi_epi64(a[m], a[8 + m]);
  }
}

// Q4_K / Q5_K: the 12 packed bytes at s -> [sc0..sc7, m0..m7] (q4k_scale_min for j = 0..7).
// Reads 16 bytes from s (the block's quants follow its scales).
static inline __m128i q4k_scale_bytes(const uint8_t* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  // p = [s0-3 | s8-11 | s4-7 | s8-11]: the 6 low bits of sc0-3 and m0-3, the low nibbles of
  // sc4-7 and (shifted below) the high nibbles that are m4-7's low bits.
  const __m128i p = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  // t = the top 2 bits of s0-3 (for sc4-7) and s4-7 (for m4-7), moved to bits 4-5.
  const __m128i t = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  const __m128i lo = _mm_and_si128(_mm_blend_epi32(p, _mm_srli_epi16(p, 4), 0x8),
                                   _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(t, 2), _mm_set1_epi8(0x30));
  return _mm_or_si128(lo, hi);
}

// IQ4_XS: the 8 six-bit scales (iq4xs_scale, 0..63) as bytes 0-7.
static inline __m128i iq4xs_scale_bytes(const BlockIQ4_XS& b) {
  uint32_t sl;
  std::memcpy(&sl, b.scales_l, 4);
  // Spread the 8 low nibbles and the 8 two-bit high parts to one byte each.
  uint64_t lo = sl;
  lo = (lo | (lo << 16)) & 0x0000FFFF0000FFFFull;
  lo = (lo | (lo << 8)) & 0x00FF00FF00FF00FFull;
  lo = (lo | (lo << 4)) & 0x0F0F0F0F0F0F0F0Full;
  uint64_t hi = b.scales_h;
  hi = (hi | (hi << 24)) & 0x000000FF000000FFull;
  hi = (hi | (hi << 12)) & 0x000F000F000F000Full;
  hi = (hi | (hi << 6)) & 0x0303030303030303ull;
  return _mm_cvtsi64_si128(static_cast<long long>(lo | (hi << 4)));
}

// Scale group `group` of rows row[0..N) (N <= 16) of a vector_group_scales type: out[f] byte l
// is field f of row l (Q4_K/Q5_K: f < 8 sc[f], f >= 8 m[f - 8]; Q6_K: the int8 scale f;
// IQ4_XS: f < 8 the 6-bit scale), d[l] and dmin[l] the rows' fp16 super-block scales (dmin:
// Q4_K/Q5_K only).
template <GgmlType T, int N>
static inline void group_scale_bytes(const uint8_t* const row[], int64_t group, __m128i out[16], uint16_t d[N],
                                     uint16_t dmin[N]) {
  static_assert(vector_group_scales(T) && N <= 16);
  __m128i in[16];
  for (int l = 0; l < N; ++l) {
    if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      using Block = std::conditional_t<T == GgmlType::Q4_K, BlockQ4_K, BlockQ5_K>;
      const Block* blk = reinterpret_cast<const Block*>(row[l]) + group;
      in[l] = q4k_scale_bytes(blk->scales);
      d[l] = blk->d, dmin[l] = blk->dmin;
    } else if constexpr (T == GgmlType::Q6_K) {
      const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row[l]) + group;
      in[l] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
      d[l] = blk->d;
    } else {
      const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(row[l]) + group;
      in[l] = iq4xs_scale_bytes(*blk);
      d[l] = blk->d;
    }
  }
  for (int l = N; l < 16; ++l) in[l] = _mm_setzero_si128();
  transpose_16x16_u8(in, out);
}

}  // namespace pagoda::cpu::detail
