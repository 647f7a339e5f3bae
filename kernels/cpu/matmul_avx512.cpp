// AVX-512 matmul kernels (F/BW/VL/DQ + VNNI). Compiled with AVX-512 flags (see CMakeLists.txt)
// and only called when cpu_supports(CpuIsa::Avx512).
//
// Quantized weights: a thread takes tiles of 32 outputs. For each K chunk of 16 blocks (512
// elements) it decodes the tile's 32 weight rows into unsigned bytes and interleaves them so that
// one zmm holds 4 consecutive bytes of 16 different outputs ("lanes = outputs"; the tile, its
// decoders and the loop over it are matmul_tile_avx512.h's, shared with the AMX kernel). One vpdpbusd
// with a broadcast dword of an activation row then advances 16 outputs by 4 products, and each
// lane ends a block holding exactly the pair's integer sum: no horizontal reductions at all, and
// the float epilogue per block is the same sequence as accumulate_block (matmul_internal.h).
// The decoded tile is reused by every activation row (4 rows per micro-kernel call, read from
// panels that each group of rows is quantized into once per call, see PanelBlock), which is
// what makes prefill compute-bound instead of memory-bound; rows go in blocks sized from the
// caches read at run time (quant_range says why from L3). Batches of at most kFewRowsMax rows
// (decode) go to matmul_rows_avx512.cpp instead, which streams the GGML blocks directly.
//
// Float weights (F32/F16/BF16) use matmul_float_simd.h's kernel at 16 lanes, except BF16 on CPUs
// with AVX512_BF16 (matmul_bf16_avx512.cpp); this file also holds the AVX-512 activation
// quantizer.
//
// The quantized path stays apart from matmul_avx2.cpp's because the two differ in algorithm,
// not only in width: here vpdpbusd (VNNI) multiplies unsigned weights (q + 128 for the signed
// types) by signed activations into exact int32 sums, with the offset taken off through a seed
// of -offset * sum(x), and activations come from panels packed once per call; AVX2 has no such
// instruction, so its kernel sums vpmaddubsw pairs in 16 bits (several groups before widening,
// as far as the type's range allows), multiplies the signed types as |q| times x with q's sign,
// and reads the decode layout of weight_pack.h, which this one does not.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/matmul_tile_avx512.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/matmul_float_simd.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own _mm512_undefined_*()
// placeholders when inlined here; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::cpu::detail {
namespace {

// One row group's block in the activation panel (kPanelBlockBytes; see matmul_internal.h).
struct PanelBlock {
  int32_t q[8][kPanelRows];     // dword g (elements 4g..4g+3) of each row
  int32_t seed[2][kPanelRows];  // -offset * (sum of x) per half (half-scale types) or block (in [0])
  float dx[kPanelRows];         // the rows' block scales
  float xsum[2][kPanelRows];    // float(sum of x) for the min terms: per half (Q2_K) or block (in [0])
  uint8_t pad[kPanelBlockBytes - 52 * 4];
};
static_assert(sizeof(PanelBlock) == kPanelBlockBytes, "panel block layout");

// Micro-kernel: one panel row group (kPanelRows rows, of which `rows` exist) x 32 outputs (the
// tile) over the tile's nblk blocks, continuing the pair accumulators stored in out (or starting
// from 0 when `first`). Per block and pair: integer sum via vpdpbusd (u8 weights x s8
// activations) seeded with the offset correction -offset * sum(x), then
// acc = fma(float(isum), s * dx, acc) exactly as accumulate_block does; Q6_K does this per
// 16-element half, Q4_K adds its min term. Every activation operand is a broadcast load at a
// fixed offset from one pointer (no per-row pointers or scalar arithmetic in the loop).
template <GgmlType T>
void panel_kernel(const Tile& tile, int nblk, const PanelBlock* pan, int rows, float* out, int64_t ldo, __mmask16 m0,
                  __mmask16 m1, bool first) {
  constexpr int R = kPanelRows;
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) {
    const bool load = !first && r < rows;
    acc[r][0] = load ? _mm512_maskz_loadu_ps(m0, out + r * ldo) : _mm512_setzero_ps();
    acc[r][1] = load ? _mm512_maskz_loadu_ps(m1, out + r * ldo + 16) : _mm512_setzero_ps();
  }
  for (int b = 0; b < nblk; ++b) {
    const PanelBlock& p = pan[b];
    __m512i ia[R][2];
    auto dot_groups = [&](auto g0) {
      constexpr int G0 = decltype(g0)::value;
      constexpr int G1 = half_scales(T) ? G0 + 4 : 8;
#pragma GCC unroll 8
      for (int g = G0; g < G1; ++g) {
        const __m512i w0 = _mm512_load_si512(&tile.qs[b][g][0][0]);
        const __m512i w1 = _mm512_load_si512(&tile.qs[b][g][16][0]);
        for (int r = 0; r < R; ++r) {
          const __m512i xv = _mm512_set1_epi32(p.q[g][r]);
          ia[r][0] = _mm512_dpbusd_epi32(ia[r][0], w0, xv);
          ia[r][1] = _mm512_dpbusd_epi32(ia[r][1], w1, xv);
        }
      }
    };
    auto scale = [&](const float* s) {
      const __m512 s0 = _mm512_load_ps(s), s1 = _mm512_load_ps(s + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_set1_ps(p.dx[r]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][0]), _mm512_mul_ps(s0, d), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][1]), _mm512_mul_ps(s1, d), acc[r][1]);
      }
    };
    // min term: acc -= xsum * (m * dx), after the scale terms (accumulate_block's order).
    auto sub_min = [&](const float* m, int h) {
      const __m512 mn0 = _mm512_load_ps(m), mn1 = _mm512_load_ps(m + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_set1_ps(p.dx[r]);
        const __m512 xsum = _mm512_set1_ps(p.xsum[h][r]);
        acc[r][0] = _mm512_fnmadd_ps(xsum, _mm512_mul_ps(mn0, d), acc[r][0]);
        acc[r][1] = _mm512_fnmadd_ps(xsum, _mm512_mul_ps(mn1, d), acc[r][1]);
      }
    };
    if constexpr (half_scales(T)) {
      for (int r = 0; r < R; ++r) ia[r][0] = ia[r][1] = _mm512_set1_epi32(p.seed[0][r]);
      dot_groups(std::integral_constant<int, 0>());
      scale(tile.s0[b]);
      for (int r = 0; r < R; ++r) ia[r][0] = ia[r][1] = _mm512_set1_epi32(p.seed[1][r]);
      dot_groups(std::integral_constant<int, 4>());
      scale(tile.s1[b]);
      if constexpr (half_mins(T)) {
        sub_min(tile.m[b], 0);
        sub_min(tile.m1[b], 1);
      }
    } else {
      for (int r = 0; r < R; ++r) ia[r][0] = ia[r][1] = _mm512_set1_epi32(p.seed[0][r]);
      dot_groups(std::integral_constant<int, 0>());
      scale(tile.s0[b]);
      if constexpr (block_min(T)) sub_min(tile.m[b], 0);
    }
  }
  for (int r = 0; r < rows; ++r) {
    _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);
    _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);
  }
}

template <GgmlType T>
void quant_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Decode-sized batches skip the tile (see matmul_rows_avx512.cpp); the results are identical.
  if (a.n <= kFewRowsMax) return matmul_few_rows_avx512(a, o_begin, o_end);
  auto tile = new_tile();
  const int64_t nb = a.k / 32;
  // Rows in blocks, each block decoding every weight tile of the range again (and reading its
  // bytes again, from memory in a model's forward pass): the fewer blocks, the fewer weight bytes
  // per product. A block's activation panels are re-read by each of its tiles, so they should
  // stay in cache, but L3 serves them well enough: with blocks whose panels fill half of a 1 MiB
  // L2 (44 rows at k = 5632) the ffn down matmul reached 46-47% of the int8 peak at n = 128 and
  // 512 (1 thread), with one block of 128 rows (1.4 MiB of panels) 55%. So blocks of panels up to
  // a quarter of L3 (at most 4 MiB, at least half of L2), the rows split evenly over the blocks.
  const int64_t panel_row_bytes = nb * kPanelBlockBytes / kPanelRows;
  const CpuCaches& caches = cpu_caches();
  const size_t l3_share = std::min<size_t>(caches.l3 / 4, size_t{4} << 20);
  const int64_t block_bytes = static_cast<int64_t>(std::max(l3_share, caches.l2 / 2));
  const int64_t max_rows = std::max<int64_t>(kPanelRows, block_bytes / panel_row_bytes / kPanelRows * kPanelRows);
  const int64_t blocks = (a.n + max_rows - 1) / max_rows;
  const int64_t block_rows = ((a.n + blocks - 1) / blocks + kPanelRows - 1) / kPanelRows * kPanelRows;
  for_each_tile_chunk<T>(a, o_begin, o_end, block_rows, *tile,
                         [&](const Tile& t, int64_t o0, int valid, int64_t b0, int nblk, int64_t r0, int64_t r1,
                             const LinePrefetch& pf) {
    const __mmask16 m0 = lane_mask(valid), m1 = lane_mask(valid - 16);
    const PanelBlock* pan = reinterpret_cast<const PanelBlock*>(a.panel) + r0 / kPanelRows * nb + b0;
    const int64_t groups = (r1 - r0 + kPanelRows - 1) / kPanelRows;
    for (int64_t g = 0; g < groups; ++g, pan += nb) {
      pf.part(g, groups);  // spread over the row groups' work
      const int64_t i = r0 + g * kPanelRows;
      panel_kernel<T>(t, nblk, pan, static_cast<int>(std::min<int64_t>(kPanelRows, r1 - i)),
                      a.out + i * a.out_features + o0, a.out_features, m0, m1, b0 == 0);
    }
  });
}
}  // namespace

// Same results as quantize_activation_row, bit for bit: the block max is exact, the scale and
// its inverse are the same single IEEE operations, vcvtps2dq rounds to nearest even like
// nearbyint, and the sums are exact integers.
void quantize_activation_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int16_t* s) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
    const float db = amax / 127.f;
    const __m512 id = _mm512_set1_ps(db != 0.f ? 1.f / db : 0.f);
    d[b] = db;
    const __m512i lim = _mm512_set1_epi32(127), neg = _mm512_set1_epi32(-127);
    const __m512i q0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), lim), neg);
    const __m512i q1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)), lim), neg);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
    s[2 * b] = static_cast<int16_t>(_mm512_reduce_add_epi32(q0));
    s[2 * b + 1] = static_cast<int16_t>(_mm512_reduce_add_epi32(q1));
  }
}

namespace {
// Packs rows [0, rows) of acts (rows <= kPanelRows; the group's lanes past `rows` get zeros)
// into the group's nb panel blocks at out.
void pack_group(GgmlType t, const QuantActs& acts, int rows, PanelBlock* out) {
  static_assert(kPanelRows == 4, "one zmm holds dwords 0-3 (4-7) of the group's 4 rows");
  const int64_t nb = acts.k / 32;
  const int off = weight_offset(t);
  const bool halves = half_scales(t), min_halves = half_mins(t);
  // Rows 0-1 of a block in one zmm (dword 8r + d: dword d of row r), rows 2-3 in another; these
  // pick dword d of row r into lane 4d + r (d < 4), and d + 4 likewise.
  const __m512i lo = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
  const __mmask8 first = rows >= 2 ? 0xFF : 0x0F, second = rows >= 4 ? 0xFF : rows == 3 ? 0x0F : 0x00;
  // Rows past `rows` read as the last row (any bytes would do: their lanes are masked off).
  const int8_t* q[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) q[r] = acts.row_q(std::min(r, rows - 1));
  for (int64_t b = 0; b < nb; ++b) {
    PanelBlock& p = out[b];
    auto pair = [&](int r, __mmask8 m) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + 32 * b));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r + 1] + 32 * b));
      return _mm512_maskz_mov_epi64(m, _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1));
    };
    const __m512i r01 = pair(0, first), r23 = pair(2, second);
    _mm512_storeu_si512(&p.q[0][0], _mm512_permutex2var_epi32(r01, lo, r23));
    _mm512_storeu_si512(&p.q[4][0], _mm512_permutex2var_epi32(r01, hi, r23));
    // The per-row terms of the 4 rows at once: (xs0, xs1) as one dword per row.
    int32_t pairs[kPanelRows];
    float dx[kPanelRows];
    for (int r = 0; r < kPanelRows; ++r) {
      std::memcpy(&pairs[r], acts.row_s(std::min(r, rows - 1)) + 2 * b, 4);
      dx[r] = acts.row_d(std::min(r, rows - 1))[b];
    }
    const __mmask8 valid = static_cast<__mmask8>((1u << rows) - 1);
    const __m128i xs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs));
    const __m128i xs0 = _mm_srai_epi32(_mm_slli_epi32(xs, 16), 16), xs1 = _mm_srai_epi32(xs, 16);
    const __m128i sum = _mm_add_epi32(xs0, xs1), neg_off = _mm_set1_epi32(-off), zero = _mm_setzero_si128();
    const __m128i seed0 = _mm_mullo_epi32(neg_off, halves ? xs0 : sum), seed1 = halves ? _mm_mullo_epi32(neg_off, xs1) : zero;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p.seed[0]), _mm_maskz_mov_epi32(valid, seed0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p.seed[1]), _mm_maskz_mov_epi32(valid, seed1));
    _mm_storeu_ps(p.dx, _mm_maskz_mov_ps(valid, _mm_loadu_ps(dx)));
    _mm_storeu_ps(p.xsum[0], _mm_maskz_mov_ps(valid, _mm_cvtepi32_ps(min_halves ? xs0 : sum)));
    _mm_storeu_ps(p.xsum[1], _mm_maskz_mov_ps(valid, min_halves ? _mm_cvtepi32_ps(xs1) : _mm_setzero_ps()));
  }
}
}  // namespace

void quantize_activation_panels_avx512(GgmlType t, const float* x, int64_t k, int64_t n, int64_t g_begin,
                                       int64_t g_end, uint8_t* panel, uint8_t* work) {
  // One group's rows quantized at a time into `work` (panel_group_bytes), then packed.
  const int64_t nb = k / 32;
  auto* q = reinterpret_cast<int8_t*>(work);
  auto* d = reinterpret_cast<float*>(work + kPanelRows * k);
  auto* s = reinterpret_cast<int16_t*>(work + kPanelRows * (k + nb * 4));
  QuantActs acts;
  acts.q = q, acts.d = d, acts.s = s, acts.k = k;
  PanelBlock* out = reinterpret_cast<PanelBlock*>(panel);
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, n - g * kPanelRows));
    for (int r = 0; r < rows; ++r)
      quantize_activation_row_avx512(x + (g * kPanelRows + r) * k, k, q + r * k, d + r * nb, s + r * 2 * nb);
    pack_group(t, acts, rows, out + g * nb);
  }
}

void matmul_range_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return quant_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    case GgmlType::F32: return float_range<F32x16, GgmlType::F32>(a, o_begin, o_end);
    case GgmlType::F16: return float_range<F32x16, GgmlType::F16>(a, o_begin, o_end);
    case GgmlType::BF16:
      if (a.xb) return matmul_bf16_dot_avx512(a, o_begin, o_end);
      return float_range<F32x16, GgmlType::BF16>(a, o_begin, o_end);
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
