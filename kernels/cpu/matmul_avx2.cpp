// AVX2 + FMA + F16C matmul kernels: the level for x86 CPUs without AVX-512 VNNI. Compiled with
// AVX2 flags (see CMakeLists.txt), only called when cpu_supports(CpuIsa::Avx2).
//
// Same scheme as matmul_avx512.cpp with 8 lanes: quantized weights are decoded per K chunk into
// tiles of 8 outputs interleaved by 4-byte groups (one ymm = 4 bytes of 8 outputs; a matrix in
// the decode layout of weight_pack.h already holds them so and is unpacked tile by tile), multiplied
// by broadcast activation dwords with vpmaddubsw (+ vpmaddwd to widen), which yields exact
// per-lane integer sums (no 16-bit saturation: see "Integer dot products" below), then the float
// epilogue of accumulate_block. A micro-kernel call takes 4 activation rows over one chunk; rows
// go in L2-sized blocks and keep their accumulators in a small buffer across the chunks. Float
// weights use matmul_float_simd.h's kernel at 8 lanes. The quantized kernel differs in
// algorithm from the AVX-512 one (matmul_avx512.cpp says how), so the two stay apart.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/matmul_float_simd.h"

namespace pagoda::cpu::detail {

namespace {

constexpr int kLanes = 8;   // outputs per tile: one ymm
constexpr int kChunk = 16;  // 32-element blocks per K chunk; a multiple of 8 (K-quant super-blocks)
constexpr int kRows = 4;    // activation rows per micro-kernel call

struct alignas(64) Tile {
  uint8_t qs[kChunk][8][kLanes][4];  // [block][dword group g][lane][byte]: u, or |q| (signed_weights types)
  int8_t sg[kChunk][8][kLanes][4];   // q = u - 128, whose signs go onto x (signed_weights types)
  float s0[kChunk][kLanes], s1[kChunk][kLanes], m[kChunk][kLanes], m1[kChunk][kLanes];
  uint8_t rows[kLanes][kChunk * 32];
};

// 32-byte aligned storage for std::vector (the accumulator rows are read with aligned loads).
template <class V>
struct AlignedAllocator {
  using value_type = V;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  V* allocate(size_t n) { return static_cast<V*>(::operator new(n * sizeof(V), std::align_val_t(64))); }
  void deallocate(V* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const AlignedAllocator&) const { return true; }
  bool operator!=(const AlignedAllocator&) const { return false; }
};

struct TileDeleter {
  void operator()(Tile* t) const { ::operator delete(t, std::align_val_t(64)); }
};

// 8x8 transpose of dwords: rows r (32 bytes at src + r * stride) -> dst + 32 * g = dword g of
// rows 0..7.
inline void interleave8(const uint8_t* src, size_t stride, uint8_t* dst) {
  __m256i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * stride));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  // u[g] (g < 4) = [rows 0-3: dword g | rows 0-3: dword g+4]; u[g + 4] the same for rows 4-7.
  for (int g = 0; g < 4; ++g) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * g), _mm256_permute2x128_si256(u[g], u[g + 4], 0x20));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * (g + 4)), _mm256_permute2x128_si256(u[g], u[g + 4], 0x31));
  }
}

// signed_weights types: the tile keeps |q| in qs and q in sg, made once per tile rather than
// once per group of rows.
template <GgmlType T>
void split_signs(Tile& tile, int nblk) {
  if constexpr (signed_weights(T)) {
    for (int b = 0; b < nblk; ++b)
      for (int g = 0; g < 8; ++g) {
        auto* p = reinterpret_cast<__m256i*>(&tile.qs[b][g][0][0]);
        const __m256i q = _mm256_xor_si256(_mm256_load_si256(p), _mm256_set1_epi8(static_cast<char>(0x80)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(&tile.sg[b][g][0][0]), q);
        _mm256_store_si256(p, _mm256_abs_epi8(q));
      }
  }
}

// The tile of outputs [o0, o0 + valid) over blocks [b0, b0 + nblk), ready for tile_kernel.
template <GgmlType T>
void fill_tile(Tile& tile, const MatmulArgs& a, int64_t o0, int valid, int64_t b0, int nblk) {
  if (a.packed && valid == kLanes && o0 % kLanes == 0 && o0 + kLanes <= a.out_features / kLanes * kLanes) {
    // A full group of the decode layout: its tiles (8 blocks each: nblk is 8 or 16, as k is a
    // multiple of 256 there and b0 of kChunk) start at o0 * row_bytes, already interleaved.
    static_assert(kChunk % 8 == 0 && kLanes == 8);
    for (int b = 0; b < nblk; b += 8)
      unpack_packed_tile_avx2(T, a.w + o0 * a.row_bytes, (b0 + b) / 8, &tile.qs[b][0][0][0], &tile.sg[b][0][0][0],
                              tile.s0[b], tile.s1[b], tile.m[b], tile.m1[b]);
    return;
  }
  for (int l = 0; l < kLanes; ++l) {
    if (l < valid) {
      const uint8_t* row = a.w + (o0 + l) * a.row_bytes;
      for (int b = 0; b < nblk; ++b) {
        if constexpr (generic_unpack(T)) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(tile.rows[l] + 32 * b), unpack_block<T>(row, b0 + b));
          const BlockScales bs = block_scales(T, row, b0 + b);
          tile.s0[b][l] = bs.s0, tile.s1[b][l] = bs.s1, tile.m[b][l] = bs.m0, tile.m1[b][l] = bs.m1;
        } else {
          decode_block32(T, row, b0 + b, tile.rows[l] + 32 * b, tile.s0[b][l], tile.s1[b][l], tile.m[b][l],
                         tile.m1[b][l]);
        }
      }
    } else {
      std::memset(tile.rows[l], 0, static_cast<size_t>(nblk) * 32);
      for (int b = 0; b < nblk; ++b) tile.s0[b][l] = tile.s1[b][l] = tile.m[b][l] = tile.m1[b][l] = 0.f;
    }
  }
  for (int b = 0; b < nblk; ++b) interleave8(tile.rows[0] + 32 * b, sizeof(tile.rows[0]), &tile.qs[b][0][0][0]);
  split_signs<T>(tile, nblk);
}

// ---- Integer dot products without saturation ----------------------------------------------
//
// Per lane, vpmaddubsw forms u[j] * x[j] + u[j+1] * x[j+1] in 16 bits (saturating) and
// vpmaddwd with ones widens the pairs to the lane's int32 sum. Both take this core's two
// multiply pipes, which is what bounds the int8 peak. For the types whose u is small the 16-bit
// pair sums of several dword groups are added first (vpaddw, which any pipe runs) and widened
// once: exact as long as no 16-bit sum can overflow. |x| <= 127 (quantize_activation_row
// clamps), so a pair is at most 2 * 127 * u_max and 32767 / (254 * u_max) groups fit: all 8 of
// a block for the 4-bit types, 4 for the 5-bit ones, 2 for Q6_K.
//
// Q8_0's u = q + 128 could saturate even one vpmaddubsw (2 * 255 * 127), and so could IQ4's
// level + 128; for those signed_weights types the product is formed as |q| * (x with q's sign),
// at most 2 * 128 * 127, widened per group. The result is then sum(q * x) rather than
// sum(u * x), with no -128 * sum(x) correction to add.

// Largest decoded byte u of each unsigned type (the table in matmul_internal.h).
constexpr int max_u(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: return 3;
    case GgmlType::Q3_K: return 7;
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: return 15;
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q5_K: return 31;
    case GgmlType::Q6_K: return 63;
    default: return 255;  // Q8_0, IQ4_NL, IQ4_XS: the signed_weights types
  }
}
// Dword groups under one scale: a block (8), or a half block for the 16-element sub-block types.
constexpr int scale_span(GgmlType t) { return half_scales(t) ? 4 : 8; }
// Groups whose 16-bit pair sums are added before widening: the largest power of two dividing
// the span that cannot overflow (1 for the signed_weights types).
constexpr int groups_per_widen(GgmlType t) {
  if (signed_weights(t)) return 1;
  const int fit = 32767 / (2 * 127 * max_u(t));
  int g = scale_span(t);
  while (g > fit) g /= 2;
  return g;
}
static_assert(groups_per_widen(GgmlType::Q4_0) == 8 && groups_per_widen(GgmlType::Q4_K) == 8 &&
              groups_per_widen(GgmlType::Q5_K) == 4 && groups_per_widen(GgmlType::Q6_K) == 2 &&
              groups_per_widen(GgmlType::Q3_K) == 4 && groups_per_widen(GgmlType::Q8_0) == 1);

// The per-row terms of the epilogue, worked out once per call instead of once per tile:
// seed[(i * nb + b) * spans + h] = -offset * (sum of row i's quantized x over span h of block b),
// the integer start of the span's sum (unsigned types with an offset); xsum[(i * nb + b) * mins
// + h] = the float sum the min term multiplies (affine types: per block, Q2_K: per half).
struct ActTerms {
  std::vector<int32_t> seed;
  std::vector<float> xsum;
};
template <GgmlType T>
void act_terms(const MatmulArgs& a, ActTerms& t) {
  constexpr int off = signed_weights(T) ? 0 : weight_offset(T);
  const int64_t nb = a.k / 32;
  if constexpr (off != 0) {
    constexpr int spans = 8 / scale_span(T);
    t.seed.resize(static_cast<size_t>(a.n * nb * spans));
    for (int64_t i = 0; i < a.n; ++i) {
      const int16_t* xs = a.acts.row_s(i);
      int32_t* seed = t.seed.data() + i * nb * spans;
      for (int64_t b = 0; b < nb; ++b) {
        if (spans == 2) seed[2 * b] = -off * xs[2 * b], seed[2 * b + 1] = -off * xs[2 * b + 1];
        else seed[b] = -off * (xs[2 * b] + xs[2 * b + 1]);
      }
    }
  }
  if constexpr (block_min(T) || half_mins(T)) {
    constexpr int mins = half_mins(T) ? 2 : 1;
    t.xsum.resize(static_cast<size_t>(a.n * nb * mins));
    for (int64_t i = 0; i < a.n; ++i) {
      const int16_t* xs = a.acts.row_s(i);
      float* xm = t.xsum.data() + i * nb * mins;
      for (int64_t b = 0; b < nb; ++b) {
        if (mins == 2) xm[2 * b] = xs[2 * b], xm[2 * b + 1] = xs[2 * b + 1];
        else xm[b] = static_cast<float>(xs[2 * b] + xs[2 * b + 1]);
      }
    }
  }
}

// Keeps a running sum a running sum: without it GCC reassociates the chains into trees that
// hold every product of a block live at once and spill them to the stack.
inline void pin(__m256i& v) { __asm__("" : "+x"(v)); }

inline __m256i broadcast_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// What one tile_kernel call reads besides the tile: the activation rows and their terms.
struct RowRefs {
  const QuantActs* acts;
  const ActTerms* terms;
};

// R activation rows x the tile's 8 outputs over nblk blocks: per lane and block (or half
// block) the exact integer sum of accumulate_block, then its float epilogue in its order. The
// accumulators live in acc_rows (8 floats per row) between K chunks; `first` starts them at 0.
template <GgmlType T, int R>
__attribute__((noinline)) void tile_kernel(const Tile& tile, int nblk, int64_t b0, const RowRefs& rr, int64_t i0,
                                           float* acc_rows, bool first) {
  constexpr int span = scale_span(T), spans = 8 / span, widen = groups_per_widen(T);
  constexpr int off = signed_weights(T) ? 0 : weight_offset(T);
  constexpr int mins = half_mins(T) ? 2 : 1;
  const QuantActs& acts = *rr.acts;
  const int64_t nb = acts.k / 32;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc_rows + kLanes * r);
  const int8_t* xq[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = acts.row_q(i0 + r) + 32 * b0;
    xd[r] = acts.row_d(i0 + r) + b0;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int b = 0; b < nblk; ++b) {
#pragma GCC unroll 2
    for (int h = 0; h < spans; ++h) {
      __m256i ia[R];
      for (int r = 0; r < R; ++r) ia[r] = _mm256_setzero_si256();
      if constexpr (signed_weights(T)) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(&tile.qs[b][g][0][0]));
          const __m256i sgn = _mm256_load_si256(reinterpret_cast<const __m256i*>(&tile.sg[b][g][0][0]));
          for (int r = 0; r < R; ++r) {
            const __m256i x = _mm256_sign_epi8(broadcast_dword(xq[r] + 32 * b + 4 * g), sgn);
            ia[r] = _mm256_add_epi32(ia[r], _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
            pin(ia[r]);
          }
        }
      } else {
#pragma GCC unroll 4
        for (int g0 = h * span; g0 < (h + 1) * span; g0 += widen) {
          __m256i sum16[R];
#pragma GCC unroll 8
          for (int g = g0; g < g0 + widen; ++g) {
            const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(&tile.qs[b][g][0][0]));
            for (int r = 0; r < R; ++r) {
              const __m256i p = _mm256_maddubs_epi16(w, broadcast_dword(xq[r] + 32 * b + 4 * g));
              sum16[r] = g == g0 ? p : _mm256_add_epi16(sum16[r], p);
              pin(sum16[r]);
            }
          }
          for (int r = 0; r < R; ++r) {
            const __m256i v = _mm256_madd_epi16(sum16[r], ones);
            ia[r] = _mm256_add_epi32(ia[r], v);
          }
        }
        if constexpr (off != 0) {
          // The offset correction (exact integers: adding it last changes nothing).
          for (int r = 0; r < R; ++r) {
            const int32_t* seed = rr.terms->seed.data() + ((i0 + r) * nb + b0 + b) * spans + h;
            ia[r] = _mm256_add_epi32(ia[r], _mm256_set1_epi32(*seed));
          }
        }
      }
      const __m256 s = _mm256_load_ps(h == 0 ? tile.s0[b] : tile.s1[b]);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[r]), _mm256_mul_ps(s, _mm256_set1_ps(xd[r][b])), acc[r]);
    }
    // min term: acc -= xsum * (m * dx), after the scale terms (accumulate_block's order).
    if constexpr (block_min(T) || half_mins(T)) {
      for (int h = 0; h < mins; ++h) {
        const __m256 mn = _mm256_load_ps(h == 0 ? tile.m[b] : tile.m1[b]);
        for (int r = 0; r < R; ++r) {
          const float xsum = rr.terms->xsum[static_cast<size_t>(((i0 + r) * nb + b0 + b) * mins + h)];
          acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(xsum), _mm256_mul_ps(mn, _mm256_set1_ps(xd[r][b])), acc[r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm256_store_ps(acc_rows + kLanes * r, acc[r]);
}

// R rows [i, i + R) (R <= kRows) of one tile and K chunk.
template <GgmlType T>
void tile_rows(const Tile& tile, int nblk, int64_t b0, const RowRefs& rr, int64_t i, int rows, float* acc_rows,
               bool first) {
  switch (rows) {
    case 4: return tile_kernel<T, 4>(tile, nblk, b0, rr, i, acc_rows, first);
    case 3: return tile_kernel<T, 3>(tile, nblk, b0, rr, i, acc_rows, first);
    case 2: return tile_kernel<T, 2>(tile, nblk, b0, rr, i, acc_rows, first);
    case 1: return tile_kernel<T, 1>(tile, nblk, b0, rr, i, acc_rows, first);
    default: return;
  }
}
static_assert(kRows == 4, "tile_rows dispatches 1..4 rows");

template <GgmlType T>
void quant_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Decode-sized batches skip the tile (see matmul_rows_avx2.h); the results are identical.
  if (a.n <= kFewRowsMax) return a.packed ? matmul_packed_avx2(a, o_begin, o_end) : matmul_few_rows_avx2(a, o_begin, o_end);
  std::unique_ptr<Tile, TileDeleter> tile(static_cast<Tile*>(::operator new(sizeof(Tile), std::align_val_t(64))));
  ActTerms terms;
  act_terms<T>(a, terms);
  const RowRefs rr{&a.acts, &terms};
  const int64_t nb = a.k / 32;
  // Rows in blocks whose quantized activations fill about half of this core's L2 (read at run
  // time), so that every tile of the block re-reads them from L2 rather than L3: with all rows
  // at once (1 MiB of int8 for 512 rows of 2048) each tile streamed them from L3 and the kernel
  // ran at two thirds of its in-cache speed. Each block decodes the tiles again, so blocks keep
  // at least kMinBlockRows rows: at K = 5632 on a 512 KiB L2 the L2 rule gives 36, and there
  // the decoding cost more than the L3 reads it saved (64 measured ~15% faster).
  constexpr int64_t kMinBlockRows = 64;
  const int64_t row_bytes = a.k + nb * static_cast<int64_t>(sizeof(float) + 2 * sizeof(int16_t));
  const int64_t l2_share = static_cast<int64_t>(cpu_caches().l2 / 2);
  const int64_t block_rows = std::max<int64_t>(kMinBlockRows, l2_share / row_bytes / kRows * kRows);
  // The block's accumulators for one tile stay in this buffer (L1) across the K chunks and go
  // to `out` once, instead of a read-modify-write of rows out_features apart per chunk.
  std::vector<float, AlignedAllocator<float>> acc_rows(static_cast<size_t>(block_rows * kLanes));
  for (int64_t r0 = 0; r0 < a.n; r0 += block_rows) {
    const int64_t r1 = std::min(a.n, r0 + block_rows);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
      const int valid = static_cast<int>(std::min<int64_t>(kLanes, o_end - o0));
      for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
        const int nblk = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
        fill_tile<T>(*tile, a, o0, valid, b0, nblk);
        for (int64_t i = r0; i < r1; i += kRows)
          tile_rows<T>(*tile, nblk, b0, rr, i, static_cast<int>(std::min<int64_t>(kRows, r1 - i)),
                       acc_rows.data() + (i - r0) * kLanes, b0 == 0);
      }
      for (int64_t i = r0; i < r1; ++i)
        std::memcpy(a.out + i * a.out_features + o0, acc_rows.data() + (i - r0) * kLanes, sizeof(float) * valid);
    }
  }
}

}  // namespace

// quantize_activation_row with AVX2, bit-identical: the max is exact in any order, and
// vcvtps2dq rounds to nearest-even as nearbyint does under the default rounding mode.
void quantize_activation_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int16_t* s) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i lim = _mm256_set1_epi32(127), neg = _mm256_set1_epi32(-127);
  auto hsum = [](__m256i v) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
  };
  for (int64_t b = 0; b < k / 32; ++b) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
      m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float db = _mm_cvtss_f32(m4) / 127.f;
    const __m256 id = _mm256_set1_ps(db != 0.f ? 1.f / db : 0.f);
    d[b] = db;
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) qi[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], id)), lim), neg);
    // Packing works per 128-bit lane: dword i of the result holds 4 values of qi[i % 4], lane
    // i / 4; the permute restores element order.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b),
                        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    s[2 * b] = static_cast<int16_t>(hsum(_mm256_add_epi32(qi[0], qi[1])));
    s[2 * b + 1] = static_cast<int16_t>(hsum(_mm256_add_epi32(qi[2], qi[3])));
  }
}

void matmul_range_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return quant_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    case GgmlType::F32: return float_range<F32x8, GgmlType::F32>(a, o_begin, o_end);
    case GgmlType::F16: return float_range<F32x8, GgmlType::F16>(a, o_begin, o_end);
    case GgmlType::BF16: return float_range<F32x8, GgmlType::BF16>(a, o_begin, o_end);
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
