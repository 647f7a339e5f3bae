// AVX-512 VNNI kernels for weights in the Rows16 layout (weight_pack.h: Q8_0, Q4_0, IQ4_NL, Q4_K,
// Q6_K, IQ4_XS) and few activation rows (decode steps, n <= kFewRowsMax), and the unpacking of a
// Rows16 group into the prefill tile of matmul_avx512.cpp.
//
// What a call computes: out[i][o] for the activation rows i < n and the outputs o of full groups
// of 16 in [o_begin, o_end) (matmul_few_rows_avx512 sends the rows past the last full group to
// the GGML-layout kernels). Shape: per group, the activation rows in passes of up to kRows16Pass,
// each pass reading the group's units once; lanes are outputs. Per 32-element block, the block's
// 8 registers (unpacked by shifts and masks for the 4- and 6-bit types) go through vpdpbusd
// against the activation dwords broadcast from the decode panel (pack_rows16_decode_panel), each
// chain seeded with -offset * (sum of x) over its span, so lane l ends the block with row l's
// exact integer sum: no reduction, no per-row pointers (Q6_K at 1-2 rows takes the 4 blocks of a
// register triple together, reading each weight byte once). The float epilogue is accumulate_block's
// (matmul_internal.h) in the same order, with the scales of block_scales decoded once per unit
// for the 16 rows, so results are bit-identical to the scalar reference and the other paths.
// Assumes a.packed, a.decode_panel made for a.n rows, and a.k a multiple of the type's unit.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_rows_avx512.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/weight_pack.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own placeholders.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The types of the layout (rows16_type), for the dispatch switches below.
#define PAGODA_ROWS16_TYPES(X) X(Q8_0) X(Q4_0) X(IQ4_NL) X(Q4_K) X(Q6_K) X(IQ4_XS)

namespace pagoda::cpu::detail {

namespace {

constexpr int kLanes = static_cast<int>(kRows16Rows);  // one zmm of int32/float lanes
static_assert(kLanes == kGroup);

// The scales of one unit for its 16 rows, block by block, as the epilogue multiplies them (the
// values of block_scales / decode_block32): s0, and s1 for the half-scale Q6_K, m for Q4_K.
template <GgmlType T>
struct UnitScales {
  static constexpr int kBlocks = rows16_unit_blocks(T);
  alignas(64) float s0[kBlocks][kLanes];
  alignas(64) float s1[half_scales(T) ? kBlocks : 1][kLanes];
  alignas(64) float m[block_min(T) ? kBlocks : 1][kLanes];
};

inline __m512 halves16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }

// The shuffle control that takes value i of the 16 rows from a vector of per-row values
// (weight_pack.h: row l's value i at byte 16 * (l / 4) + 4i + l % 4) to the 16 dword lanes in row
// order, zero-extended: byte 4i + r of 128-bit lane c (row 4c + r) to dword r of that lane.
inline __m512i value_index(int i) {
  constexpr int z = static_cast<int>(0x80808000u);
  return _mm512_set4_epi32(z | (4 * i + 3), z | (4 * i + 2), z | (4 * i + 1), z | (4 * i));
}

template <GgmlType T>
inline void unit_scales(const uint8_t* unit, UnitScales<T>& sc) {
  if constexpr (T == GgmlType::Q8_0) {
    for (int j = 0; j < 2; ++j) _mm512_store_ps(sc.s0[j], halves16(unit + kRows16Q8ScaleOffset + 32 * j));
  } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::IQ4_NL) {
    for (int j = 0; j < 2; ++j) _mm512_store_ps(sc.s0[j], halves16(unit + kRows16Q4ScaleOffset + 32 * j));
  } else if constexpr (T == GgmlType::IQ4_XS) {
    const uint8_t* head = unit + kRows16IQ4XSHeadOffset;
    const __m512 d = halves16(head);
    const __m512i p = load64(head + 32);
    // N's nibbles as bytes: [low nibbles | high nibbles] (bytes 0-31, 32-63 of the value vector).
    const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 96)), m4 = _mm256_set1_epi8(0x0F);
    const __m512i nib = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(n, m4)),
                                           _mm256_and_si256(_mm256_srli_epi16(n, 4), m4), 1);
    const __m512i v[2] = {_mm512_and_si512(p, _mm512_set1_epi8(63)),
                          _mm512_ternarylogic_epi32(_mm512_slli_epi16(nib, 2), _mm512_set1_epi8(0x3C),
                                                    _mm512_and_si512(_mm512_srli_epi16(p, 6), _mm512_set1_epi8(0x03)), 0xEA)};
    for (int j = 0; j < 8; ++j) {
      const __m512i ls = _mm512_sub_epi32(_mm512_shuffle_epi8(v[j / 4], value_index(j % 4)), _mm512_set1_epi32(32));
      _mm512_store_ps(sc.s0[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(ls)));
    }
  } else if constexpr (T == GgmlType::Q4_K) {
    const uint8_t* head = unit + kRows16Q4KHeadOffset;
    const __m512 d = halves16(head), dmin = halves16(head + 32);
    const __m512i p0 = load64(head + 64), p1 = load64(head + 128), p2 = load64(head + 192);
    const __m512i m6 = _mm512_set1_epi8(63);
    // Values 12-15 from the top 2 bits of P0, P1, P2 (bits 0-1, 2-3, 4-5); 16-bit shifts, the
    // masks drop what crosses bytes.
    const __m512i top = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p0, 6), _mm512_set1_epi8(0x03)),
                                        _mm512_and_si512(_mm512_srli_epi16(p1, 4), _mm512_set1_epi8(0x0C)));
    const __m512i v[4] = {_mm512_and_si512(p0, m6), _mm512_and_si512(p1, m6), _mm512_and_si512(p2, m6),
                          _mm512_ternarylogic_epi32(_mm512_srli_epi16(p2, 2), _mm512_set1_epi8(0x30), top, 0xEA)};
    for (int val = 0; val < 16; ++val) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(v[val / 4], value_index(val % 4)));
      if (val < 8) _mm512_store_ps(sc.s0[val], _mm512_mul_ps(d, f));
      else _mm512_store_ps(sc.m[val - 8], _mm512_mul_ps(dmin, f));
    }
  } else {
    static_assert(T == GgmlType::Q6_K);
    const __m512 d = halves16(unit + kRows16Q6KDOffset);
    for (int s = 0; s < 16; ++s) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + kRows16Q6KScaleOffset + 16 * s));
      const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
      _mm512_store_ps(s % 2 ? sc.s1[s / 2] : sc.s0[s / 2], _mm512_mul_ps(d, f));
    }
  }
}

// Q6_K: register c of block 4h + p from the triple (h, c) at abc (weight_pack.h). The 16-bit
// shifts bring in bits of the neighbouring byte where the masks drop them.
template <int P>
inline __m512i q6k_register(const uint8_t* abc) {
  const auto bytes = [](int v) { return _mm512_set1_epi8(static_cast<char>(v)); };
  if constexpr (P == 0) return _mm512_and_si512(load64(abc), bytes(0x3F));  // A & 63
  if constexpr (P == 1)                                                       // (B & 15) | (A >> 6) << 4
    return _mm512_ternarylogic_epi32(load64(abc + 64), bytes(0x0F), _mm512_and_si512(_mm512_srli_epi16(load64(abc), 2), bytes(0x30)), 0xEA);
  if constexpr (P == 2) return _mm512_and_si512(_mm512_srli_epi16(load64(abc + 128), 2), bytes(0x3F));  // C >> 2
  if constexpr (P == 3)                                                                                  // (C & 3) | (B >> 4) << 2
    return _mm512_ternarylogic_epi32(load64(abc + 128), bytes(0x03), _mm512_and_si512(_mm512_srli_epi16(load64(abc + 64), 2), bytes(0x3C)), 0xEA);
}

// Q6_K: block 4h + P's 8 registers.
template <int P>
inline void q6k_block(const uint8_t* unit, int h, __m512i w[8]) {
  for (int c = 0; c < 8; ++c) w[c] = q6k_register<P>(unit + kRows16Q6KTripleBytes * (8 * h + c));
}

// Block j of a unit as 8 registers of unsigned bytes (decode_block32's u): register c holds
// elements 4c..4c+3 of the 16 rows.
template <GgmlType T>
inline void unit_block(const uint8_t* unit, int j, __m512i w[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::IQ4_NL || T == GgmlType::IQ4_XS) {
    // 4 nibble registers: elements 4c.. in the low nibbles, 16 + 4c.. in the high ones.
    const uint8_t* regs = unit + 256 * j;
    for (int c = 0; c < 4; ++c) {
      const __m512i raw = load64(regs + 64 * c);
      w[c] = _mm512_and_si512(raw, m4), w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      if constexpr (T != GgmlType::Q4_0) {  // level + 128 by a byte lookup
        const __m512i table = _mm512_broadcast_i32x4(unpack_iq4_table());
        w[c] = _mm512_shuffle_epi8(table, w[c]), w[c + 4] = _mm512_shuffle_epi8(table, w[c + 4]);
      }
    }
    return;
  }
  if constexpr (T == GgmlType::Q6_K) {
    switch (j % 4) {
      case 0: return q6k_block<0>(unit, j / 4, w);
      case 1: return q6k_block<1>(unit, j / 4, w);
      case 2: return q6k_block<2>(unit, j / 4, w);
      default: return q6k_block<3>(unit, j / 4, w);
    }
  }
  for (int c = 0; c < 8; ++c) {
    if constexpr (T == GgmlType::Q8_0) {
      w[c] = load64(unit + 512 * j + 64 * c);
    } else if constexpr (T == GgmlType::Q4_K) {
      const __m512i raw = load64(unit + 512 * (j / 2) + 64 * c);
      w[c] = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(raw, 4) : raw, m4);
    }
  }
}

// The decode panel's fields after a row's 32 quants (see kRows16PanelBytes), as dwords.
constexpr int kSeed0 = 8, kDx = 9, kXsum = 10, kSeed1 = 11;

// Row r's integer sums of block j start from its seeds (-offset * sum of x over each chain's span).
inline __m512i seed(const int32_t* xr, int field) { return _mm512_set1_epi32(xr[field]); }

// The float epilogue of one block for one activation row (accumulate_block's order): isum, and
// isum1 for the half-scale Q6_K (its elements 16..31), are the block's integer sums.
template <GgmlType T>
inline __m512 block_epilogue(__m512 acc, __m512i isum, __m512i isum1, const UnitScales<T>& sc, int j, const int32_t* xr) {
  float dxf;
  std::memcpy(&dxf, xr + kDx, 4);
  const __m512 dx = _mm512_set1_ps(dxf);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_load_ps(sc.s0[j]), dx), acc);
  if constexpr (half_scales(T)) acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum1), _mm512_mul_ps(_mm512_load_ps(sc.s1[j]), dx), acc);
  if constexpr (block_min(T)) {
    float xsum;
    std::memcpy(&xsum, xr + kXsum, 4);
    acc = _mm512_fnmadd_ps(_mm512_set1_ps(xsum), _mm512_mul_ps(_mm512_load_ps(sc.m[j]), dx), acc);
  }
  return acc;
}

// Q6_K at up to this many activation rows takes a unit's blocks four at a time (q6k_quad_sums):
// the 4 blocks' 2 x R integer chains and their registers then still fit the 32 zmm.
constexpr int kQ6KQuadRows = 2;

// The integer sums of Q6_K blocks 4h..4h+3 of a unit for all R activation rows of the panel (x:
// block 4h's rows), the triples (h, c) read once for the 4 blocks. sums[p][r][0] and [1]: block
// 4h + p's elements 0..15 and 16..31 for row r.
template <int R>
inline void q6k_quad_sums(const uint8_t* unit, int h, const uint8_t* x, __m512i (&sums)[4][R][2]) {
  const int32_t* xr[4][R];
  for (int p = 0; p < 4; ++p)
    for (int r = 0; r < R; ++r) {
      xr[p][r] = reinterpret_cast<const int32_t*>(x + (p * R + r) * kRows16PanelBytes);
      sums[p][r][0] = seed(xr[p][r], kSeed0), sums[p][r][1] = seed(xr[p][r], kSeed1);
    }
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    const uint8_t* abc = unit + kRows16Q6KTripleBytes * (8 * h + c);
    const __m512i w[4] = {q6k_register<0>(abc), q6k_register<1>(abc), q6k_register<2>(abc), q6k_register<3>(abc)};
    for (int p = 0; p < 4; ++p)
      for (int r = 0; r < R; ++r) sums[p][r][c / 4] = _mm512_dpbusd_epi32(sums[p][r][c / 4], w[p], _mm512_set1_epi32(xr[p][r][c]));
  }
}

// R activation rows (i0..i0+R-1) x the 16 outputs of the group at `group`, over all of k; the
// lanes in `store` are written to out[(i0 + r) * out_features + lane].
template <GgmlType T, int R>
void rows16_kernel(const MatmulArgs& a, const uint8_t* group, int64_t i0, float* out, __mmask16 store,
                   const uint8_t* prefetch, int64_t prefetch_lines) {
  constexpr int B = rows16_unit_blocks(T);
  constexpr int off = weight_offset(T);
  const int64_t nb = a.k / 32, units = nb / B;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const uint8_t* x = a.decode_panel + i0 * kRows16PanelBytes;
  const int64_t x_step = a.n * kRows16PanelBytes;
  // The next group's lines, an equal share per block (without divisions in the loop, which cost
  // more than a one-row block's arithmetic).
  const int64_t pf_per_block = (prefetch_lines + nb - 1) / nb;
  const uint8_t* pf = prefetch;
  const uint8_t* const pf_end = prefetch + 64 * prefetch_lines;
  auto prefetch_blocks = [&](int blocks) {
    for (int64_t i = 0; i < blocks * pf_per_block && pf < pf_end; ++i, pf += 64) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
  };
  UnitScales<T> sc;
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* unit = group + u * rows16_unit_bytes(T);
    unit_scales<T>(unit, sc);
    if constexpr (T == GgmlType::Q6_K && R <= kQ6KQuadRows) {
      if (a.n == R) {  // the panel's rows are these R (always, for the n <= kRows16Pass sent here)
#pragma GCC unroll 1
        for (int h = 0; h < 2; ++h, x += 4 * R * kRows16PanelBytes) {
          prefetch_blocks(4);
          __m512i sums[4][R][2];
          q6k_quad_sums<R>(unit, h, x, sums);
          for (int p = 0; p < 4; ++p)
            for (int r = 0; r < R; ++r)
              acc[r] = block_epilogue<T>(acc[r], sums[p][r][0], sums[p][r][1], sc, 4 * h + p,
                                         reinterpret_cast<const int32_t*>(x + (p * R + r) * kRows16PanelBytes));
        }
        continue;
      }
    }
    // Not unrolled: unrolled over the unit's blocks, GCC 12 kept the 16 accumulators on the stack.
#pragma GCC unroll 1
    for (int j = 0; j < B; ++j, x += x_step) {
      prefetch_blocks(1);
      __m512i w[8];
      unit_block<T>(unit, j, w);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const int32_t* xr = reinterpret_cast<const int32_t*>(x + r * kRows16PanelBytes);
        __m512i isum = off != 0 ? seed(xr, kSeed0) : _mm512_setzero_si512(), isum1 = _mm512_setzero_si512();
        if constexpr (half_scales(T)) {
          isum1 = seed(xr, kSeed1);
          for (int c = 0; c < 4; ++c) isum = _mm512_dpbusd_epi32(isum, w[c], _mm512_set1_epi32(xr[c]));
          for (int c = 4; c < 8; ++c) isum1 = _mm512_dpbusd_epi32(isum1, w[c], _mm512_set1_epi32(xr[c]));
        } else {
          for (int c = 0; c < 8; ++c) isum = _mm512_dpbusd_epi32(isum, w[c], _mm512_set1_epi32(xr[c]));
        }
        acc[r] = block_epilogue<T>(acc[r], isum, isum1, sc, j, xr);
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + (i0 + r) * a.out_features, store, acc[r]);
}

// Activation rows per pass: 16 accumulators and a block's 8 registers fit the 32 zmm, so a
// decode step of up to 16 sequences reads each group's weights once.
constexpr int kRows16Pass = 16;
static_assert(kRows16Pass >= kFewRowsMax);

using Kernel = void (*)(const MatmulArgs&, const uint8_t*, int64_t, float*, __mmask16, const uint8_t*, int64_t);
template <GgmlType T, size_t... I>
constexpr std::array<Kernel, sizeof...(I)> kernels_for(std::index_sequence<I...>) {
  return {&rows16_kernel<T, static_cast<int>(I) + 1>...};
}
template <GgmlType T>
constexpr std::array<Kernel, kRows16Pass> kKernels = kernels_for<T>(std::make_index_sequence<kRows16Pass>());

template <GgmlType T>
void rows16_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  constexpr int64_t G = kLanes;
  for (int64_t g0 = o_begin / G * G; g0 < o_end; g0 += G) {
    const int hi = static_cast<int>(std::min(o_end, g0 + G) - g0), lo = static_cast<int>(std::max<int64_t>(o_begin - g0, 0));
    const __mmask16 store = static_cast<__mmask16>(lane_mask(hi) & ~lane_mask(lo));
    const uint8_t* group = a.w + g0 * a.row_bytes;
    // The next group is the next contiguous G rows' bytes: prefetched into L2 while this one
    // computes (16 rows are one stream, which the hardware prefetchers follow, but not far enough
    // ahead at one activation row).
    const int64_t lines = g0 + G < o_end ? G * static_cast<int64_t>(a.row_bytes) / 64 : 0;
    const uint8_t* next = group + G * a.row_bytes;
    for (int64_t i0 = 0; i0 < a.n; i0 += kRows16Pass) {
      const int64_t rows = std::min<int64_t>(kRows16Pass, a.n - i0);
      kKernels<T>[static_cast<size_t>(rows - 1)](a, group, i0, a.out + g0, store, next, i0 == 0 ? lines : 0);
    }
  }
}

template <GgmlType T>
void tile_half(const uint8_t* group, int64_t b0, int nblk, const Rows16TileHalf& dst) {
  constexpr int B = rows16_unit_blocks(T);
  UnitScales<T> sc;
  for (int b = 0; b < nblk; ++b) {
    const int64_t blk = b0 + b;
    const int j = static_cast<int>(blk % B);
    const uint8_t* unit = group + (blk / B) * rows16_unit_bytes(T);
    if (b == 0 || j == 0) unit_scales<T>(unit, sc);
    __m512i w[8];
    unit_block<T>(unit, j, w);
    for (int c = 0; c < 8; ++c) _mm512_storeu_si512(dst.qs + b * dst.qs_block + c * dst.qs_reg, w[c]);
    _mm512_storeu_ps(dst.s0 + b * dst.s_block, _mm512_load_ps(sc.s0[j]));
    if constexpr (half_scales(T)) _mm512_storeu_ps(dst.s1 + b * dst.s_block, _mm512_load_ps(sc.s1[j]));
    if constexpr (block_min(T)) _mm512_storeu_ps(dst.m + b * dst.s_block, _mm512_load_ps(sc.m[j]));
  }
}

}  // namespace

void pack_rows16_decode_panel(GgmlType t, const QuantActs& acts, int64_t n, uint8_t* panel) {
  const int64_t nb = acts.k / 32;
  const int off = weight_offset(t);
  const bool halves = half_scales(t);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < n; ++i) {
      uint8_t* p = panel + (b * n + i) * kRows16PanelBytes;
      std::memcpy(p, acts.row_q(i) + 32 * b, 32);
      const int xs0 = acts.row_s(i)[2 * b], xs1 = acts.row_s(i)[2 * b + 1];
      const int32_t seed0 = halves ? -off * xs0 : -off * (xs0 + xs1), seed1 = halves ? -off * xs1 : 0;
      const float xsum = static_cast<float>(xs0 + xs1);
      std::memcpy(p + 4 * kSeed0, &seed0, 4);
      std::memcpy(p + 4 * kDx, acts.row_d(i) + b, 4);
      std::memcpy(p + 4 * kXsum, &xsum, 4);
      std::memcpy(p + 4 * kSeed1, &seed1, 4);
    }
}

void matmul_rows16_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return rows16_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_ROWS16_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

void rows16_tile_half(GgmlType t, const uint8_t* group, int64_t b0, int nblk, const Rows16TileHalf& dst) {
  switch (t) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return tile_half<GgmlType::T>(group, b0, nblk, dst);
    PAGODA_ROWS16_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
