// The AVX-512 prefill weight tile, shared by the two prefill kernels that reuse it: the VNNI
// one (matmul_avx512.cpp) and the AMX one (matmul_amx_kernel.h, whose B tiles are this tile's
// registers). It owns the tile layout, its decoders (from GGML blocks and from Rows16 groups) and
// the loop over row blocks, output tiles and K chunks that both kernels run.
//
// Include only from translation units compiled with the AVX-512 flags (CMakeLists.txt); like
// matmul_internal.h everything is local to each including file (an anonymous namespace), so a
// copy compiled with more flags (AMX) can never stand in for another's.
//
// Layout: a tile holds 32 outputs ("lanes") x one K chunk of kChunk 32-element blocks. For block
// b, the 64 bytes at qs[b][g][16h] hold dword g (elements 4g..4g+3) of lanes 16h..16h+15 as
// unsigned bytes u (matmul_internal.h's decode, u = q + offset): one zmm of "lanes = outputs"
// for vpdpbusd, and, read with a stride of 128 bytes over g = 0..7, the 8 x 64-byte B tile of
// AMX's dot products (VNNI layout: row g, column l = bytes 4g..4g+3 of output l).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_unpack_x86.h"
#include "kernels/cpu/weight_pack.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own _mm512_undefined_*()
// placeholders when inlined; the warnings are about the headers, not this code.
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

// A range of cache lines to prefetch into L2 while a tile computes, issued in parts so that no
// burst of prefetches fills the core's miss queues at once (a burst of a whole quarter tile per
// K chunk stalled the prefetching loop itself, and the tile's decode then still waited on loads).
struct LinePrefetch {
  const char* base = nullptr;
  int64_t lines = 0;
  // Part i of `parts` (about lines / parts lines).
  void part(int64_t i, int64_t parts) const {
    for (int64_t l = lines * i / parts; l < lines * (i + 1) / parts; ++l) _mm_prefetch(base + 64 * l, _MM_HINT_T1);
  }
  void all() const { part(0, 1); }
};

// The loop both prefill kernels run for outputs [o_begin, o_end) (o_begin a multiple of 16):
// rows in blocks of block_rows; per block, tiles of kLanes outputs; per tile, K chunks of kChunk
// blocks: decode the chunk into `tile`, then compute(tile, o0, valid, b0, nblk, r0, r1, pf) runs
// rows [r0, r1) against it (valid: outputs of the tile that exist; b0 == 0 is the first chunk)
// and issues pf, this chunk's share of the weights of the tile this thread decodes next (the
// next tile of the range; after the last, the first tile again for the next row block, or the
// tile past o_end, which a thread's next task usually starts with). Each row block decodes the
// tiles again, which costs little next to its dot products.
template <GgmlType T, class Compute>
void for_each_tile_chunk(const MatmulArgs& a, int64_t o_begin, int64_t o_end, int64_t block_rows, Tile& tile,
                         Compute&& compute) {
  const int64_t nb = a.k / 32;
  const int64_t n_chunks = (nb + kChunk - 1) / kChunk;
  for (int64_t r0 = 0; r0 < a.n; r0 += block_rows) {
    const int64_t r1 = std::min(a.n, r0 + block_rows);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
      const int valid = static_cast<int>(std::min<int64_t>(kLanes, o_end - o0));
      // The next tile's weights are one contiguous range, in either layout.
      const int64_t next = o0 + kLanes < o_end ? o0 + kLanes : r1 < a.n ? o_begin : o_end;
      const int64_t next_rows = std::clamp<int64_t>(
          std::min(next + kLanes, next < o_end ? o_end : a.out_features) - next, 0, kLanes);
      const char* next_w = reinterpret_cast<const char*>(a.w + next * a.row_bytes);
      const int64_t next_lines = next_rows * static_cast<int64_t>(a.row_bytes) / 64;
      for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
        const int nblk = static_cast<int>(std::min<int64_t>(kChunk, nb - b0));
        const int64_t c = b0 / kChunk;
        const int64_t l0 = next_lines * c / n_chunks, l1 = next_lines * (c + 1) / n_chunks;
        if constexpr (rows16_type(T)) {
          if (a.packed) fill_tile_rows16<T>(tile, a, o0, valid, b0, nblk);
          else fill_tile<T>(tile, a, o0, valid, b0, nblk);
        } else {
          fill_tile<T>(tile, a, o0, valid, b0, nblk);
        }
        compute(static_cast<const Tile&>(tile), o0, valid, b0, nblk, r0, r1, LinePrefetch{next_w + 64 * l0, l1 - l0});
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::cpu::detail
