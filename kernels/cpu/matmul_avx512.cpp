// AVX-512 matmul kernels (F/BW/VL/DQ + VNNI). Compiled with AVX-512 flags (see CMakeLists.txt)
// and only called when cpu_supports(CpuIsa::Avx512).
//
// Quantized weights: a thread takes tiles of 32 outputs. For each K chunk of 16 blocks (512
// elements) it decodes the tile's 32 weight rows into unsigned bytes and interleaves them so that
// one zmm holds 4 consecutive bytes of 16 different outputs ("lanes = outputs"). One vpdpbusd
// with a broadcast dword of an activation row then advances 16 outputs by 4 products, and each
// lane ends a block holding exactly the pair's integer sum: no horizontal reductions at all, and
// the float epilogue per block is the same sequence as accumulate_block (matmul_internal.h).
// The decoded tile is reused by every activation row (4 rows per micro-kernel call, read from
// panels packed once per call, see PanelBlock), which is what makes prefill compute-bound
// instead of memory-bound; rows go in blocks sized from the L2 read at run time. Batches of at most kFewRowsMax rows
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
#include <memory>
#include <new>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/weight_pack.h"
#include "kernels/cpu/matmul_float_simd.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own _mm512_undefined_*()
// placeholders when inlined here; the warnings are about the headers, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::cpu::detail {
namespace {

constexpr int kLanes = 32;  // outputs per tile: two zmm of 16 lanes
constexpr int kChunk = 16;  // 32-element blocks per K chunk; a multiple of 8 (K-quant super-blocks)

// One tile's worth of decoded weights for one K chunk.
struct alignas(64) Tile {
  uint8_t qs[kChunk][8][kLanes][4];  // [block][dword group g][lane][byte]: element 4g+byte of the block
  float s0[kChunk][kLanes];          // scale of elements 0..15 of the block (all 32 unless Q6_K)
  float s1[kChunk][kLanes];          // scale of elements 16..31 (Q6_K)
  float m[kChunk][kLanes];           // min term (affine types; Q2_K: of elements 0..15)
  float m1[kChunk][kLanes];          // Q2_K's min term of elements 16..31
  uint8_t rows[kLanes][kChunk * 32]; // decoded rows before interleaving (generic path)
};

struct TileDeleter {
  void operator()(Tile* t) const { ::operator delete(t, std::align_val_t(64)); }
};
std::unique_ptr<Tile, TileDeleter> new_tile() {
  return std::unique_ptr<Tile, TileDeleter>(static_cast<Tile*>(::operator new(sizeof(Tile), std::align_val_t(64))));
}

__mmask16 lane_mask(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

// Interleaves 16 rows of 32 bytes (row r at src + r * stride) so that the 64 bytes at
// dst + 128 * g hold dword g of rows 0..15 in lane order; xor_mask is applied to every byte.
// Method: pair row r with row r + 8 in one zmm, run an 8x8 dword transpose inside both 256-bit
// halves at once (unpack 32, unpack 64), then gather the 128-bit pieces into lane order.
inline void interleave16(const uint8_t* src, size_t stride, uint8_t* dst, __m512i xor_mask) {
  __m512i z[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * stride));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + (i + 8) * stride));
    z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  }
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // h = 0: rows 0-3 (8-11); h = 1: rows 4-7 (12-15)
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  // u[g] (g < 4) = [rows 0-3: dword g | rows 0-3: dword g+4 | rows 8-11: g | rows 8-11: g+4],
  // u[g + 4] the same for rows 4-7 / 12-15.
  const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int g = 0; g < 4; ++g) {
    _mm512_store_si512(dst + 128 * g, _mm512_xor_si512(_mm512_permutex2var_epi64(u[g], lo, u[g + 4]), xor_mask));
    _mm512_store_si512(dst + 128 * (g + 4), _mm512_xor_si512(_mm512_permutex2var_epi64(u[g], hi, u[g + 4]), xor_mask));
  }
}

// Decodes blocks [b0, b0 + nblk) of one weight row into lane l of the tile (tile.rows[l] and the
// scales): the values of decode_block32, computed 32 bytes at a time. For K-quants b0 and nblk
// are multiples of 8 (whole super-blocks).
template <GgmlType T>
void decode_row_chunk(const uint8_t* row, int64_t b0, int nblk, Tile& tile, int l) {
  uint8_t* u = tile.rows[l];
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  auto store = [&](int b, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * b), v); };
  if constexpr (T == GgmlType::Q4_0) {
    for (int b = 0; b < nblk; ++b) {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b0 + b;
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
      const __m128i lo = _mm_and_si128(v, _mm_set1_epi8(0x0F));
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
      store(b, _mm256_set_m128i(hi, lo));
      tile.s0[b][l] = _cvtsh_ss(blk->d);
    }
  } else if constexpr (T == GgmlType::Q4_K) {
    for (int sb = 0; sb < nblk / 8; ++sb) {
      const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(row) + b0 / 8 + sb;
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * c));
        store(8 * sb + 2 * c, _mm256_and_si256(v, m4));
        store(8 * sb + 2 * c + 1, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      }
      const float d = _cvtsh_ss(blk->d), dmin = _cvtsh_ss(blk->dmin);
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        q4k_scale_min(j, blk->scales, sc, mn);
        tile.s0[8 * sb + j][l] = d * static_cast<float>(sc);
        tile.m[8 * sb + j][l] = dmin * static_cast<float>(mn);
      }
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    for (int sb = 0; sb < nblk / 8; ++sb) {
      const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b0 / 8 + sb;
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h));
        // 16-bit shifts move bits between neighbouring bytes; the masks drop them again.
        auto high2 = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m2), 4); };
        const int b = 8 * sb + 4 * h;
        store(b + 0, _mm256_or_si256(_mm256_and_si256(ql0, m4), high2(0)));
        store(b + 1, _mm256_or_si256(_mm256_and_si256(ql1, m4), high2(2)));
        store(b + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high2(4)));
        store(b + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high2(6)));
      }
      const float d = _cvtsh_ss(blk->d);
      for (int j = 0; j < 8; ++j) {
        tile.s0[8 * sb + j][l] = d * static_cast<float>(blk->scales[2 * j]);
        tile.s1[8 * sb + j][l] = d * static_cast<float>(blk->scales[2 * j + 1]);
      }
    }
  } else if constexpr (generic_unpack(T)) {
    for (int b = 0; b < nblk; ++b) {
      store(b, unpack_block<T>(row, b0 + b));
      const BlockScales bs = block_scales(T, row, b0 + b);
      tile.s0[b][l] = bs.s0, tile.s1[b][l] = bs.s1, tile.m[b][l] = bs.m0, tile.m1[b][l] = bs.m1;
    }
  } else {
    for (int b = 0; b < nblk; ++b)
      decode_block32(T, row, b0 + b, u + 32 * b, tile.s0[b][l], tile.s1[b][l], tile.m[b][l], tile.m1[b][l]);
  }
}

// Fills the tile with blocks [b0, b0 + nblk) of outputs [o0, o0 + valid); lanes past `valid`
// get zero weights and scales.
template <GgmlType T>
void fill_tile(Tile& tile, const MatmulArgs& a, int64_t o0, int valid, int64_t b0, int nblk) {
  if (T == GgmlType::Q8_0 && valid == kLanes) {
    // Fast path: interleave straight from the GGML blocks (qs at offset 2, stride 34), flipping
    // the sign bit to get u = q + 128, and convert the 16-bit scales 16 at a time.
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const uint8_t* base = a.w + o0 * a.row_bytes;
    for (int b = 0; b < nblk; ++b) {
      const uint8_t* blk = base + (b0 + b) * sizeof(BlockQ8_0);
      interleave16(blk + 2, a.row_bytes, &tile.qs[b][0][0][0], flip);
      interleave16(blk + 2 + 16 * a.row_bytes, a.row_bytes, &tile.qs[b][0][16][0], flip);
      alignas(64) uint16_t d[kLanes];
      for (int l = 0; l < kLanes; ++l) std::memcpy(&d[l], blk + l * a.row_bytes, 2);
      const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
      const __m512 d1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d + 16)));
      _mm512_store_ps(tile.s0[b], d0);
      _mm512_store_ps(tile.s0[b] + 16, d1);
    }
    return;
  }
  for (int l = 0; l < kLanes; ++l) {
    if (l < valid) {
      decode_row_chunk<T>(a.w + (o0 + l) * a.row_bytes, b0, nblk, tile, l);
    } else {
      std::memset(tile.rows[l], 0, static_cast<size_t>(nblk) * 32);
      for (int b = 0; b < nblk; ++b) tile.s0[b][l] = tile.s1[b][l] = tile.m[b][l] = tile.m1[b][l] = 0.f;
    }
  }
  const __m512i none = _mm512_setzero_si512();
  for (int b = 0; b < nblk; ++b) {
    interleave16(tile.rows[0] + 32 * b, sizeof(tile.rows[0]), &tile.qs[b][0][0][0], none);
    interleave16(tile.rows[16] + 32 * b, sizeof(tile.rows[0]), &tile.qs[b][0][16][0], none);
  }
}

// fill_tile for weights in the Rows16 layout (weight_pack.h, a.packed, rows16_type(T)): a full
// group of 16 rows is one tile half (lanes 16h..16h+15), unpacked by rows16_tile_half; rows past
// the last full group are GGML rows, decoded and interleaved as fill_tile does; lanes past
// `valid` are zero. o0 is a multiple of 16 (the dispatcher splits outputs by kLanes).
template <GgmlType T>
void fill_tile_rows16(Tile& tile, const MatmulArgs& a, int64_t o0, int valid, int64_t b0, int nblk) {
  static_assert(kRows16Rows * 2 == kLanes, "a Rows16 group is one half of the tile");
  const int64_t full_rows = a.out_features / 16 * 16;
  for (int h = 0; h < 2; ++h) {
    const int64_t r0 = o0 + 16 * h;
    if (r0 + 16 <= full_rows) {
      const Rows16TileHalf dst{&tile.qs[0][0][16 * h][0], sizeof(tile.qs[0]), sizeof(tile.qs[0][0]),
                               &tile.s0[0][16 * h],      &tile.s1[0][16 * h], &tile.m[0][16 * h],
                               kLanes};
      rows16_tile_half(T, a.w + r0 * a.row_bytes, b0, nblk, dst);
      continue;
    }
    const int lanes = std::clamp(valid - 16 * h, 0, 16);
    for (int l = 16 * h; l < 16 * h + 16; ++l) {
      if (l - 16 * h < lanes) {
        decode_row_chunk<T>(a.w + (o0 + l) * a.row_bytes, b0, nblk, tile, l);
      } else {
        std::memset(tile.rows[l], 0, static_cast<size_t>(nblk) * 32);
        for (int b = 0; b < nblk; ++b) tile.s0[b][l] = tile.s1[b][l] = tile.m[b][l] = tile.m1[b][l] = 0.f;
      }
    }
    for (int b = 0; b < nblk; ++b)
      interleave16(tile.rows[16 * h] + 32 * b, sizeof(tile.rows[0]), &tile.qs[b][0][16 * h][0], _mm512_setzero_si512());
  }
}

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
  // Rows in blocks whose activation panels fill about half of this core's L2 (read at run
  // time), so that every tile of the block re-reads them from L2; each block decodes the tiles
  // again, which costs little next to the block's dot products.
  const int64_t panel_row_bytes = nb * kPanelBlockBytes / kPanelRows;
  const int64_t l2_share = static_cast<int64_t>(cpu_caches().l2 / 2);
  const int64_t block_rows = std::max<int64_t>(kPanelRows, l2_share / panel_row_bytes / kPanelRows * kPanelRows);
  for (int64_t r0 = 0; r0 < a.n; r0 += block_rows) {
    const int64_t r1 = std::min(a.n, r0 + block_rows);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
      const int valid = static_cast<int>(std::min<int64_t>(kLanes, o_end - o0));
      const __mmask16 m0 = lane_mask(valid), m1 = lane_mask(valid - 16);
      // The next tile's weights are one contiguous range; prefetching a slice of it with each
      // chunk keeps memory busy while this tile computes.
      const char* next = reinterpret_cast<const char*>(a.w + (o0 + kLanes) * a.row_bytes);
      const int64_t next_lines = o0 + 2 * kLanes <= o_end ? kLanes * static_cast<int64_t>(a.row_bytes) / 64
                                 : o0 + kLanes < o_end    ? (o_end - o0 - kLanes) * static_cast<int64_t>(a.row_bytes) / 64
                                                          : 0;
      const int64_t n_chunks = (nb + kChunk - 1) / kChunk;
      for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
        const int nblk = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
        const int64_t c = b0 / kChunk;
        for (int64_t l = next_lines * c / n_chunks; l < next_lines * (c + 1) / n_chunks; ++l)
          _mm_prefetch(next + 64 * l, _MM_HINT_T1);
        if constexpr (rows16_type(T)) {
          if (a.packed) fill_tile_rows16<T>(*tile, a, o0, valid, b0, nblk);
          else fill_tile<T>(*tile, a, o0, valid, b0, nblk);
        } else {
          fill_tile<T>(*tile, a, o0, valid, b0, nblk);
        }
        const bool first = b0 == 0;
        const PanelBlock* pan = reinterpret_cast<const PanelBlock*>(a.panel) + r0 / kPanelRows * nb + b0;
        for (int64_t i = r0; i < r1; i += kPanelRows, pan += nb)
          panel_kernel<T>(*tile, nblk, pan, static_cast<int>(std::min<int64_t>(kPanelRows, r1 - i)),
                          a.out + i * a.out_features + o0, a.out_features, m0, m1, first);
      }
    }
  }
}

}  // namespace

void pack_activation_panels_avx512(GgmlType t, const QuantActs& acts, int64_t n, int64_t g_begin, int64_t g_end,
                                   uint8_t* panel) {
  const int64_t nb = acts.k / 32;
  const int off = weight_offset(t);
  const bool halves = half_scales(t), min_halves = half_mins(t);
  PanelBlock* out = reinterpret_cast<PanelBlock*>(panel);
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      PanelBlock& p = out[g * nb + b];
      std::memset(&p, 0, sizeof(p));
      for (int r = 0; r < kPanelRows; ++r) {
        const int64_t i = g * kPanelRows + r;
        if (i >= n) break;
        const int8_t* q = acts.row_q(i) + 32 * b;
        for (int d = 0; d < 8; ++d) std::memcpy(&p.q[d][r], q + 4 * d, 4);
        const int xs0 = acts.row_s(i)[2 * b], xs1 = acts.row_s(i)[2 * b + 1];
        p.seed[0][r] = halves ? -off * xs0 : -off * (xs0 + xs1);
        p.seed[1][r] = halves ? -off * xs1 : 0;
        p.dx[r] = acts.row_d(i)[b];
        p.xsum[0][r] = static_cast<float>(min_halves ? xs0 : xs0 + xs1);
        p.xsum[1][r] = static_cast<float>(min_halves ? xs1 : 0);
      }
    }
  }
}

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
