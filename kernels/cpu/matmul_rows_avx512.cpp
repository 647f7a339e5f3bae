// AVX-512 VNNI kernels for quantized weights and few activation rows (decode steps, see
// kFewRowsMax in matmul_internal.h).
//
// The tile path of matmul_avx512.cpp interleaves weights so that many activation rows can reuse
// them; with one row, interleaving costs as much as the dot products and decode becomes
// compute-bound. Here instead a zmm holds one 32-element block of two weight rows (outputs l and
// l + 8) as unsigned bytes, vpdpbusd against the broadcast activation block gives 8 partial sums
// per output, and a transpose-and-add tree (reduce_rows16) turns 8 such registers into per-output
// integer sums for 16 outputs. Those integers are exactly the ones the tile path and
// accumulate_block compute, and the float epilogue below is the same sequence of operations, so
// results are bit-identical to the other paths: batch invariance holds across the switch.
// Weights in the Rows16 decode layout (weight_pack.h) go to matmul_rows16_avx512.cpp instead,
// all but the GGML rows past their last full group of 16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_rows_avx512.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/weight_pack.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own placeholders.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::cpu::detail {

namespace {

// p[i] = [8 partial sums of output i | 8 of output i + 8], partials 0-3 covering elements 0-15 of
// the block and 4-7 elements 16-31. Returns per-output sums of elements 0-15 (half0) and 16-31
// (half1), lanes in output order 0..15.
inline void reduce_rows16(const __m512i p[8], __m512i& half0, __m512i& half1) {
  __m512i t[4], u[2];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]), _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  // u[i], 128-bit piece c: the sum over that piece of p[4i..4i+3], i.e. pieces 0 and 1 are
  // outputs 4i..4i+3 (elements 0-15, 16-31), pieces 2 and 3 outputs 4i+8..4i+11.
  const __m512i even = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i odd = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  half0 = _mm512_permutex2var_epi64(u[0], even, u[1]);
  half1 = _mm512_permutex2var_epi64(u[0], odd, u[1]);
}

// [32 bytes at lo | 32 bytes at hi]. The upper half by a masked broadcast (a load and a p0/p5
// uop) rather than an insert (port 5 only).
inline __m512i pair(const uint8_t* lo, const uint8_t* hi) {
  return _mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))), 0xF0,
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)));
}

// Blocks per scale group: the unit whose scales are decoded at once (a K-quant super-block).
template <GgmlType T>
constexpr int kBlocksPerGroup = blocks_per_group(T);

template <GgmlType T>
void load_scales(const uint8_t* const row[kGroup], int64_t group, GroupScales<T>& sc) {
  if constexpr (quad_scales(T)) {
    load_quad_scales<T>(row, group, sc);
  } else if constexpr (generic_unpack(T)) {
    for (int l = 0; l < kGroup; ++l) group_scales<T>(row[l], group, &sc.s0[0][l], &sc.s1[0][l], &sc.m[0][l], &sc.m1[0][l], kGroup);
  } else {
    static_assert(T == GgmlType::Q8_0 || T == GgmlType::Q4_0);
    constexpr size_t bsz = T == GgmlType::Q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    alignas(32) uint16_t dh[kGroup];
    for (int l = 0; l < kGroup; ++l) std::memcpy(&dh[l], row[l] + group * bsz, 2);
    _mm512_store_ps(sc.s0[0], _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh))));
  }
}

// Block j of scale group `group` for outputs i and i + 8, as unsigned bytes (decode_block32's u).
// (Q4_K, Q5_K, Q6_K and IQ4_XS have their own paths below.)
template <GgmlType T>
inline __m512i load_pair(const uint8_t* ri, const uint8_t* ri8, int64_t group, int j) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // 16 bytes of 4-bit indices at offset `off` of each row's block -> [lo | hi nibbles] per row
  // (Q4_0's layout), as in the Q4_0 branch below.
  auto nibble_pair = [&](size_t off) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ri + off));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ri8 + off));
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(a, a)), _mm256_set_m128i(b, b), 1);
    return _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, z, _mm512_srli_epi16(z, 4)), m4);
  };
  if constexpr (T == GgmlType::IQ4_NL || T == GgmlType::Q4_1) {
    const size_t off = T == GgmlType::IQ4_NL ? group * sizeof(BlockIQ4_NL) + offsetof(BlockIQ4_NL, qs)
                                             : group * sizeof(BlockQ4_1) + offsetof(BlockQ4_1, qs);
    const __m512i idx = nibble_pair(off);
    if constexpr (T == GgmlType::Q4_1) return idx;
    // level + 128 by a byte lookup (the table of unpack_iq4_levels in every 128-bit lane).
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(unpack_iq4_table()), idx);
  } else if constexpr (generic_unpack(T)) {
    const int64_t b = group * kBlocksPerGroup<T> + j;
    return _mm512_inserti64x4(_mm512_castsi256_si512(unpack_block<T>(ri, b)), unpack_block<T>(ri8, b), 1);
  } else if constexpr (T == GgmlType::Q8_0) {
    const size_t off = group * sizeof(BlockQ8_0) + 2;
    return _mm512_xor_si512(pair(ri + off, ri8 + off), _mm512_set1_epi8(static_cast<char>(0x80)));
  } else {
    static_assert(T == GgmlType::Q4_0, "load_pair: type with its own path");
    const size_t off = group * sizeof(BlockQ4_0) + 2;
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ri + off));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ri8 + off));
    // z = [a a | b b] (128-bit pieces); low nibbles from the first copy of each, high nibbles
    // (elements 16-31) from the second.
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(a, a)), _mm256_set_m128i(b, b), 1);
    const __m512i shifted = _mm512_srli_epi16(z, 4);
    return _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, z, shifted), m4);
  }
}

// IQ4_XS, blocks j and j + 1 of a scale group at once: their 32 contiguous bytes of indices per
// row hold elements 0-15 of each block in the low nibbles and 16-31 in the high ones, so
// lo[i] = [block j elements 0-15, block j + 1 elements 0-15] of rows i and i + 8 (as levels +
// 128) and hi[i] the same for elements 16-31. Against activations arranged the same way, one
// vpdpbusd pair puts block j's partial sums in lanes 0-3 of each row and block j + 1's in lanes
// 4-7, so one reduction serves two blocks (and the unpacking needs no 128-bit inserts).
inline void iq4xs_two_blocks(const uint8_t* ri, const uint8_t* ri8, int64_t group, int j, __m512i& lo, __m512i& hi) {
  const size_t off = group * sizeof(BlockIQ4_XS) + offsetof(BlockIQ4_XS, qs) + 16 * j;
  const __m512i z = pair(ri + off, ri8 + off), m4 = _mm512_set1_epi8(0x0F);
  const __m512i table = _mm512_broadcast_i32x4(unpack_iq4_table());
  lo = _mm512_shuffle_epi8(table, _mm512_and_si512(z, m4));
  hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
}

// The rows of one call of a kernel: 16 weight rows (the last repeated past `valid`) and R
// activation rows.
template <int R>
struct FewRows {
  const uint8_t* row[kGroup];
  ActRow x[R];
  FewRows(const MatmulArgs& a, int64_t o0, int valid, int64_t i0) {
    for (int l = 0; l < kGroup; ++l) row[l] = a.w + (o0 + std::min(l, valid - 1)) * a.row_bytes;
    for (int r = 0; r < R; ++r)
      x[r] = {a.acts.row_q(i0 + r), a.acts.row_d(i0 + r), a.acts.row_s(i0 + r), a.acts.row_fsum(i0 + r)};
  }
};

// Prefetches this group's share of the next rows (see few_rows_range).
inline void prefetch_share(const uint8_t* prefetch, int64_t lines, int64_t g, int64_t groups) {
  for (int64_t l = lines * g / groups; l < lines * (g + 1) / groups; ++l)
    _mm_prefetch(reinterpret_cast<const char*>(prefetch + 64 * l), _MM_HINT_T1);
}

// Q4_K and Q5_K in the row-quad layout (matmul_rows_avx512.h): blocks 2p and 2p + 1 of a scale
// group share 32 bytes of qs per row (low / high nibbles), loaded as two quad sets (elements
// 0-15 and 16-31 of both blocks); vpdpbusd of both sets into one register gives each row's
// block sum in 4 lanes. Q4_K's high nibbles are used in place (x16, masked with 0xF0) and their
// sums shifted back, exactly, since every product is a multiple of 16. Q5_K's fifth bits (bit
// j of qh byte e: element e of block j) are loaded once per group, also as two quad sets.
template <GgmlType T, int R>
void few_rows_quads(const MatmulArgs& a, const FewRows<R>& f, __m512 acc[R], const uint8_t* prefetch,
                    int64_t prefetch_lines) {
  static_assert(T == GgmlType::Q4_K || T == GgmlType::Q5_K);
  using Block = std::conditional_t<T == GgmlType::Q4_K, BlockQ4_K, BlockQ5_K>;
  const int64_t groups = a.k / 256;
  GroupScales<T> sc;
  const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    prefetch_share(prefetch, prefetch_lines, g, groups);
    load_quad_scales<T>(f.row, g, sc);
    __m512i qha[4], qhb[4];
    if constexpr (T == GgmlType::Q5_K) load_quads32(f.row, g * sizeof(Block) + offsetof(BlockQ5_K, qh), qha, qhb);
    for (int p = 0; p < 4; ++p) {
      __m512i wa[4], wb[4];
      load_quads32(f.row, g * sizeof(Block) + offsetof(Block, qs) + 32 * p, wa, wb);
      __m512i ea[4], eb[4], oa[4], ob[4];  // blocks 2p (even) and 2p + 1 (odd), elements 0-15 / 16-31
      for (int k = 0; k < 4; ++k) {
        if constexpr (T == GgmlType::Q4_K) {
          ea[k] = _mm512_and_si512(wa[k], m4), oa[k] = _mm512_andnot_si512(m4, wa[k]);
          eb[k] = _mm512_and_si512(wb[k], m4), ob[k] = _mm512_andnot_si512(m4, wb[k]);
        } else {
          // Bit j of qh moved to bit 4 (16-bit shifts: the caller's masks drop what crosses bytes).
          auto bit4 = [&](__m512i qh, int j) {
            const __m512i v = j <= 4 ? _mm512_slli_epi16(qh, 4 - j) : _mm512_srli_epi16(qh, j - 4);
            return _mm512_and_si512(v, _mm512_set1_epi8(0x10));
          };
          ea[k] = _mm512_ternarylogic_epi32(wa[k], m4, bit4(qha[k], 2 * p), 0xEA);  // (w & 0x0F) | bit
          eb[k] = _mm512_ternarylogic_epi32(wb[k], m4, bit4(qhb[k], 2 * p), 0xEA);
          oa[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wa[k], 4), m4, bit4(qha[k], 2 * p + 1), 0xEA);
          ob[k] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wb[k], 4), m4, bit4(qhb[k], 2 * p + 1), 0xEA);
        }
      }
      const int64_t b = 8 * g + 2 * p;
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = f.x[r].q + 32 * b;
        auto x16 = [&](int off) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + off))); };
        const __m512i xa0 = x16(0), xb0 = x16(16), xa1 = x16(32), xb1 = x16(48);
        __m512i pe[4], po[4];
        for (int k = 0; k < 4; ++k) {
          pe[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, ea[k], xa0), eb[k], xb0);
          po[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, oa[k], xa1), ob[k], xb1);
        }
        __m512i so = reduce_quads(po);
        if constexpr (T == GgmlType::Q4_K) so = _mm512_srai_epi32(so, 4);
        acc[r] = block_epilogue<T>(acc[r], reduce_quads(pe), zero, sc, 2 * p, f.x[r], b);
        acc[r] = block_epilogue<T>(acc[r], so, zero, sc, 2 * p + 1, f.x[r], b + 1);
      }
    }
  }
}

// Q4_0, Q4_1 and IQ4_NL in the row-quad layout: a block's 16 bytes of nibbles per row (elements
// 0-15 in the low nibbles, 16-31 in the high ones) are one quad set, so the low and high nibbles
// meet activation elements 0-15 and 16-31 in the same lanes and one reduction serves the block.
template <GgmlType T, int R>
void few_rows_quads32(const MatmulArgs& a, const FewRows<R>& f, __m512 acc[R], const uint8_t* prefetch,
                      int64_t prefetch_lines) {
  static_assert(T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::IQ4_NL);
  using Block = std::conditional_t<T == GgmlType::Q4_0, BlockQ4_0, std::conditional_t<T == GgmlType::Q4_1, BlockQ4_1, BlockIQ4_NL>>;
  const int64_t nb = a.k / 32;
  GroupScales<T> sc;
  const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_share(prefetch, prefetch_lines, b, nb);
    __m512i z[4];
    if constexpr (T == GgmlType::Q4_1) {  // d and m are the first two halves of the block
      load_quads(f.row, b * sizeof(Block), z);
      __m512 d, m;
      quad_head_halves(z, d, m);
      _mm512_store_ps(sc.s0[0], d);
      _mm512_store_ps(sc.m[0], _mm512_sub_ps(_mm512_setzero_ps(), m));  // block_scales' m0 = -m
    } else {
      alignas(32) uint16_t dh[kGroup];
      for (int l = 0; l < kGroup; ++l) std::memcpy(&dh[l], f.row[l] + b * sizeof(Block), 2);
      _mm512_store_ps(sc.s0[0], _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh))));
    }
    load_quads(f.row, b * sizeof(Block) + offsetof(Block, qs), z);
    __m512i lo[4], hi[4];
    for (int k = 0; k < 4; ++k) {
      lo[k] = _mm512_and_si512(z[k], m4), hi[k] = _mm512_and_si512(_mm512_srli_epi16(z[k], 4), m4);
      if constexpr (T == GgmlType::IQ4_NL) {  // level + 128 by a byte lookup
        const __m512i table = _mm512_broadcast_i32x4(unpack_iq4_table());
        lo[k] = _mm512_shuffle_epi8(table, lo[k]), hi[k] = _mm512_shuffle_epi8(table, hi[k]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = f.x[r].q + 32 * b;
      const __m512i xa = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq)));
      const __m512i xb = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16)));
      __m512i p[4];
      for (int k = 0; k < 4; ++k) p[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo[k], xa), hi[k], xb);
      acc[r] = block_epilogue<T>(acc[r], reduce_quads(p), zero, sc, 0, f.x[r], b);
    }
  }
}

// R activation rows x 16 outputs in the pair layout (the types without a few_rows_quads path):
// a zmm holds one block of weight rows l and l + 8.
template <GgmlType T, int R>
void few_rows_pairs(const MatmulArgs& a, const FewRows<R>& f, __m512 acc[R], const uint8_t* prefetch,
                    int64_t prefetch_lines) {
  constexpr int bpg = kBlocksPerGroup<T>;
  const uint8_t* const* row = f.row;
  const int64_t groups = a.k / (32 * bpg);
  GroupScales<T> sc;
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    prefetch_share(prefetch, prefetch_lines, g, groups);
    load_scales<T>(row, g, sc);
    if constexpr (T == GgmlType::IQ4_XS) {
      for (int j = 0; j < bpg; j += 2) {
        const int64_t b = g * bpg + j;
        __m512i lo[8], hi[8];
        for (int i = 0; i < 8; ++i) iq4xs_two_blocks(row[i], row[i + 8], g, j, lo[i], hi[i]);
        for (int r = 0; r < R; ++r) {
          // [block j elements 0-15 | block j + 1 elements 0-15] twice, and the same for 16-31.
          const __m512i x2 = _mm512_loadu_si512(f.x[r].q + 32 * b);
          const __m512i xlo = _mm512_shuffle_i32x4(x2, x2, _MM_SHUFFLE(2, 0, 2, 0));
          const __m512i xhi = _mm512_shuffle_i32x4(x2, x2, _MM_SHUFFLE(3, 1, 3, 1));
          __m512i p[8], h0, h1;
          for (int i = 0; i < 8; ++i) p[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo[i], xlo), hi[i], xhi);
          reduce_rows16(p, h0, h1);  // h0: block j's sums, h1: block j + 1's
          acc[r] = block_epilogue<T>(acc[r], h0, zero, sc, j, f.x[r], b);
          acc[r] = block_epilogue<T>(acc[r], h1, zero, sc, j + 1, f.x[r], b + 1);
        }
      }
      continue;
    }
    auto dot_block = [&](int j, const __m512i w[8]) {
      const int64_t b = g * bpg + j;
      for (int r = 0; r < R; ++r) {
        const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.x[r].q + 32 * b)));
        __m512i p[8], h0, h1;
        for (int i = 0; i < 8; ++i) p[i] = _mm512_dpbusd_epi32(zero, w[i], xv);
        reduce_rows16(p, h0, h1);
        acc[r] = block_epilogue<T>(acc[r], h0, h1, sc, j, f.x[r], b);
      }
    };
    if constexpr (T == GgmlType::Q6_K) {
      // Blocks 4h..4h+3 share qh's 32 bytes at 32h (2 bits each) and ql's 64 bytes at 64h
      // (nibbles of blocks 4h, 4h+2 | 4h+1, 4h+3): loaded once per four blocks.
      for (int h = 0; h < 2; ++h) {
        __m512i qh[8], ql[2][8];
        const size_t base = g * sizeof(BlockQ6_K), qho = base + offsetof(BlockQ6_K, qh) + 32 * h;
        for (int i = 0; i < 8; ++i) {
          qh[i] = pair(row[i] + qho, row[i + 8] + qho);
          for (int c = 0; c < 2; ++c) {
            const size_t qlo = base + offsetof(BlockQ6_K, ql) + 64 * h + 32 * c;
            ql[c][i] = pair(row[i] + qlo, row[i + 8] + qlo);
          }
        }
        for (int p = 0; p < 4; ++p) {
          __m512i w[8];
          for (int i = 0; i < 8; ++i) {
            const __m512i lo = p >> 1 ? _mm512_srli_epi16(ql[p & 1][i], 4) : ql[p & 1][i];
            // Bits 2p, 2p + 1 of qh to bits 4-5 of the same byte.
            const __m512i hi = p < 2 ? _mm512_slli_epi16(qh[i], 4 - 2 * p) : p == 2 ? qh[i] : _mm512_srli_epi16(qh[i], 2);
            w[i] = _mm512_ternarylogic_epi32(lo, _mm512_set1_epi8(0x0F), _mm512_and_si512(hi, _mm512_set1_epi8(0x30)), 0xEA);
          }
          dot_block(4 * h + p, w);
        }
      }
    } else {
      for (int j = 0; j < bpg; ++j) {
        __m512i w[8];
        for (int i = 0; i < 8; ++i) w[i] = load_pair<T>(row[i], row[i + 8], g, j);
        dot_block(j, w);
      }
    }
  }
}

// R activation rows (i0..i0+R-1) x outputs [o0, o0 + valid), valid <= 16, over all of k. Lanes
// past `valid` repeat the last output and are not stored.
template <GgmlType T, int R>
void few_rows(const MatmulArgs& a, int64_t o0, int valid, int64_t i0, const uint8_t* prefetch,
              int64_t prefetch_lines) {
  const FewRows<R> f(a, o0, valid, i0);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) few_rows_quads<T, R>(a, f, acc, prefetch, prefetch_lines);
  else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::IQ4_NL)
    few_rows_quads32<T, R>(a, f, acc, prefetch, prefetch_lines);
  else few_rows_pairs<T, R>(a, f, acc, prefetch, prefetch_lines);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(a.out + (i0 + r) * a.out_features + o0, lane_mask(valid), acc[r]);
}

template <GgmlType T>
// Outputs [o_begin, o_end) of weights in the GGML layout.
void few_rows_range_ggml(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kGroup) {
    const int valid = static_cast<int>(std::min<int64_t>(kGroup, o_end - o0));
    // Prefetch the next group's rows (one contiguous range) while this group computes: 16
    // interleaved row streams are more than the hardware prefetchers follow well. Into L2, not
    // L1: a few hundred lines in flight into L1 tie up its fill buffers, which the loads of this
    // group need (measured: decode 5-15 points of the stream bandwidth better on a 2-core
    // Sapphire Rapids-class VM, for every type tried).
    const int64_t next_rows = std::min<int64_t>(kGroup, std::max<int64_t>(0, o_end - o0 - kGroup));
    const uint8_t* next = a.w + (o0 + kGroup) * a.row_bytes;
    const int64_t lines = next_rows * static_cast<int64_t>(a.row_bytes) / 64;
    // Rows in chunks of up to 8 (accumulators stay in registers); later chunks find this
    // group's weights in L2 and prefetch nothing more.
    for (int64_t i0 = 0; i0 < a.n; i0 += 8) {
      const int64_t pl = i0 == 0 ? lines : 0;
      switch (std::min<int64_t>(8, a.n - i0)) {
        case 1: few_rows<T, 1>(a, o0, valid, i0, next, pl); break;
        case 2: few_rows<T, 2>(a, o0, valid, i0, next, pl); break;
        case 3: few_rows<T, 3>(a, o0, valid, i0, next, pl); break;
        case 4: few_rows<T, 4>(a, o0, valid, i0, next, pl); break;
        case 5: few_rows<T, 5>(a, o0, valid, i0, next, pl); break;
        case 6: few_rows<T, 6>(a, o0, valid, i0, next, pl); break;
        case 7: few_rows<T, 7>(a, o0, valid, i0, next, pl); break;
        default: few_rows<T, 8>(a, o0, valid, i0, next, pl); break;
      }
    }
  }
}


// Weights in the Rows16 layout (a.packed, rows16_type(T)): the full groups of 16 through
// matmul_rows16_avx512 (a group the range cuts is computed whole and stored in part), the GGML
// rows past them here.
template <GgmlType T>
void few_rows_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  if constexpr (rows16_type(T)) {
    if (a.packed) {
      const int64_t full_rows = a.out_features / static_cast<int64_t>(kRows16Rows) * static_cast<int64_t>(kRows16Rows);
      if (o_begin < full_rows) matmul_rows16_avx512(a, o_begin, std::min(o_end, full_rows));
      if (o_end > full_rows) few_rows_range_ggml<T>(a, std::max(o_begin, full_rows), o_end);
      return;
    }
  }
  few_rows_range_ggml<T>(a, o_begin, o_end);
}

}  // namespace

void matmul_few_rows_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return few_rows_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
