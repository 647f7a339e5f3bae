// AVX2 unpacking of one 32-element weight block to the unsigned bytes u of decode_block32
// (matmul_internal.h) for the types that share the generic kernels: Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q5_K, IQ4_NL, IQ4_XS. Included by the AVX2 and the AVX-512 kernel files only (both are
// compiled with AVX2 available); everything is static inline for the reason matmul_internal.h
// gives.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>

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
// instead the kernels decode the packed scales of several rows at once with SIMD shuffles and
// turn rows into lanes (load_scales in matmul_rows_avx2.h, load_quad_scales in
// matmul_rows_avx512.h). The integers are those of q4k_scale_min / iq4xs_scale / Q6_K's int8
// scales, so the floats are bit-identical to block_scales'.

// The types whose scale groups the few-rows kernels decode that way.
static inline constexpr bool vector_group_scales(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS;
}

}  // namespace pagoda::cpu::detail
