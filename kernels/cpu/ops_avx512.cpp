// AVX-512 variants of the non-matmul ops (compiled with AVX-512 flags, called only after
// detail::ops_have_avx512()): the f16 conversions, the row kernels of simd_ops.h (RMSNorm, the
// silu gate, softmax; written once for both widths) at 16 lanes, and paged attention.
//
// The attention kernel stays apart from ops_avx2.cpp's because the two differ in algorithm, not
// only in width: this one is the plain kernel only (no window, no soft-capping), takes keys in
// tiles of 16 with masked loads for partial heads and walks the block table without a division
// per key, and finishes 16 dot products at once with reduce16's cross-lane folding; the AVX2
// one covers windowed and soft-capped attention too, in tiles of 8 folded by reduce8.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_ops.h"

namespace pagoda::cpu::detail {
namespace {

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << remaining) - 1u);
}

}  // namespace

void f32_to_f16_avx512(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

void f16_to_f32_avx512(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

void rms_norm_row_avx512(const float* x, const float* w, float eps, float* y, int64_t n) {
  simd_rms_norm_row<F32x16>(x, w, eps, y, n);
}

void silu_mul_row_avx512(const float* gate, const float* up, float* out, int64_t n) {
  simd_silu_mul_row<F32x16>(gate, up, out, n);
}

void softmax_row_avx512(float* x, int64_t n) { simd_softmax_row<F32x16>(x, n); }

namespace {

// Lane k of the result = the sum of the 16 lanes of a[k] (16 dot products finished at once):
// pairs of vectors are folded by halves, quarters, then within 128-bit lanes, and a final
// permute puts key k in lane k. About 3 instructions per key instead of a full reduction each.
inline __m512 reduce16(__m512* a) {
  __m512 b[8], c[4], d[2];
  for (int m = 0; m < 8; ++m)  // quarter q of b[m]: key 2m (q < 2) or 2m+1, 8 partial sums each
    b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
  for (int m = 0; m < 4; ++m)  // quarter L of c[m]: key 4m + L, 4 partial sums
    c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
  for (int m = 0; m < 2; ++m)  // per quarter: [c0 (2 partials), c1, ...] interleaved
    d[m] = _mm512_add_ps(_mm512_unpacklo_ps(c[2 * m], c[2 * m + 1]), _mm512_unpackhi_ps(c[2 * m], c[2 * m + 1]));
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 4L + r of e holds key 4r + L.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, e);
}

// A Q8_0 head row of groups of G = 16 or 32 (head_dim a multiple of 16, so every chunk of 16 is
// whole): chunk c holds values c*16.. of group c*16/G, times the group's scale.
template <int NC, int G>
inline void load_q8_head(const uint8_t* src, float* dst) {
  constexpr int kChunks = G / 16;  // chunks of 16 values per group
#pragma GCC unroll 16
  for (int gi = 0; gi < NC / kChunks; ++gi) {
    const uint8_t* g = src + gi * (G + 2);
    uint16_t dh;
    std::memcpy(&dh, g, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(dh));
#pragma GCC unroll 2
    for (int c = 0; c < kChunks; ++c) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2 + 16 * c));
      _mm512_storeu_ps(dst + (gi * kChunks + c) * 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
    }
  }
}

// One head row at `src` (the pool's element type) as NC*16 floats at dst; lanes past head_dim
// (outside `last` in the final chunk) are zero.
template <int NC>
inline void load_head(GgmlType type, int head_dim, const uint8_t* src, __mmask16 last, float* dst) {
  if (type == GgmlType::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c)
      _mm512_storeu_ps(dst + c * 16, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(c == NC - 1 ? last : 0xFFFF, h + c * 16)));
  } else if (type == GgmlType::F32) {
    const auto* f = reinterpret_cast<const float*>(src);
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c)
      _mm512_storeu_ps(dst + c * 16, _mm512_maskz_loadu_ps(c == NC - 1 ? last : 0xFFFF, f + c * 16));
  } else if (kv_q8_group(head_dim) == 32) {
    load_q8_head<NC, 32>(src, dst);
  } else if (kv_q8_group(head_dim) == 16) {
    load_q8_head<NC, 16>(src, dst);
  } else {
    // Q8_0 with groups of 8 (small heads): the scalar dequantization, then zero padding.
    kv_q8_dequantize(src, head_dim, kv_q8_group(head_dim), dst);
    for (int i = head_dim; i < NC * 16; ++i) dst[i] = 0.0f;
  }
}

// Converts the rows of keys [i0, i0 + nk) of one KV head to F32 in `tile` (16 rows of NC*16
// floats); lanes past head_dim and rows past nk are zero, so every tile is processed whole.
template <int NC>
inline void load_tile(const AttnRows& r, const KvPool& p, int kv_head, const int32_t* block_table, int i0, int nk,
                      __mmask16 last, float* tile) {
  const int bs = p.block_size;
  const int64_t head_off = static_cast<int64_t>(kv_head) * p.head_bytes(), row = p.row_bytes();
  int blk = i0 / bs, in_blk = i0 % bs;  // walked forward: no division per key
  for (int k = 0; k < 16; ++k) {
    float* dst = tile + k * NC * 16;
    if (k >= nk) {
      for (int c = 0; c < NC; ++c) _mm512_storeu_ps(dst + c * 16, _mm512_setzero_ps());
      continue;
    }
    const int64_t slot = i0 + k >= r.tail_base ? attention_slot(r, block_table, bs, i0 + k)
                                               : static_cast<int64_t>(block_table[blk]) * bs + in_blk;
    const int64_t off = slot * row + head_off;
    if (++in_blk == bs) in_blk = 0, ++blk;
    load_head<NC>(p.type, p.head_dim, static_cast<const uint8_t*>(p.data) + off, last, dst);
  }
}

// NC = 16-float chunks per head (head_dim <= 16 * NC), a compile-time constant so the
// accumulators stay in registers.
template <int NC>
void attention_tiles(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k, const KvPool& v,
                     int kv_head, const int32_t* block_table, float* scratch) {
  const __mmask16 last = tail_mask(head_dim - (NC - 1) * 16);
  const int max_ctx = r.n_ctx + r.n_q - 1;       // the last row's context
  const int64_t row_scores = static_cast<int64_t>(g) * max_ctx;
  float* scores = scratch;                        // [n_q][g][max_ctx]
  float* tile = scratch + r.n_q * row_scores;     // [16][NC * 16]
  const __m512 vscale = _mm512_set1_ps(scale);
  // Scores: each tile of 16 keys is converted once for every row and head that sees it.
  for (int i0 = 0; i0 < max_ctx; i0 += 16) {
    load_tile<NC>(r, k, kv_head, block_table, i0, std::min(16, max_ctx - i0), last, tile);
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi;
      if (i0 >= ctx) continue;
      for (int j = 0; j < g; ++j) {
        const float* qj = r.q + qi * r.q_stride + static_cast<int64_t>(j) * head_dim;
        __m512 acc[16];
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; ++kk) acc[kk] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int c = 0; c < NC; ++c) {
          const __m512 qc = _mm512_maskz_loadu_ps(c == NC - 1 ? last : 0xFFFF, qj + c * 16);
#pragma GCC unroll 16
          for (int kk = 0; kk < 16; ++kk)
            acc[kk] = _mm512_fmadd_ps(qc, _mm512_loadu_ps(tile + (kk * NC + c) * 16), acc[kk]);
        }
        _mm512_mask_storeu_ps(scores + qi * row_scores + static_cast<int64_t>(j) * ctx + i0,
                              tail_mask(ctx - i0), _mm512_mul_ps(reduce16(acc), vscale));
      }
    }
  }
  for (int qi = 0; qi < r.n_q; ++qi) {
    const int ctx = r.n_ctx + qi;
    for (int j = 0; j < g; ++j) softmax_row_avx512(scores + qi * row_scores + static_cast<int64_t>(j) * ctx, ctx);
    float* o = r.out + qi * r.out_stride;
    std::memset(o, 0, sizeof(float) * static_cast<size_t>(g) * head_dim);
  }
  // Outputs: weighted V rows, accumulated in index order per row and head.
  for (int i0 = 0; i0 < max_ctx; i0 += 16) {
    load_tile<NC>(r, v, kv_head, block_table, i0, std::min(16, max_ctx - i0), last, tile);
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi;
      if (i0 >= ctx) continue;
      const int nk = std::min(16, ctx - i0);
      for (int j = 0; j < g; ++j) {
        float* oj = r.out + qi * r.out_stride + static_cast<int64_t>(j) * head_dim;
        const float* w = scores + qi * row_scores + static_cast<int64_t>(j) * ctx + i0;
        __m512 acc[NC];
#pragma GCC unroll 16
        for (int c = 0; c < NC; ++c) acc[c] = _mm512_maskz_loadu_ps(c == NC - 1 ? last : 0xFFFF, oj + c * 16);
        for (int kk = 0; kk < nk; ++kk) {
          const __m512 wk = _mm512_set1_ps(w[kk]);
#pragma GCC unroll 16
          for (int c = 0; c < NC; ++c) acc[c] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(tile + (kk * NC + c) * 16), acc[c]);
        }
#pragma GCC unroll 16
        for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(oj + c * 16, c == NC - 1 ? last : 0xFFFF, acc[c]);
      }
    }
  }
}

}  // namespace

void attention_group_avx512(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  // Keys go in tiles of 16, converted once to F32 and shared by all rows and heads. Per head and
  // tile, 16 dot products finish together (reduce16); after the softmax, V rows are accumulated
  // into register-held outputs. A row's arithmetic does not depend on the other rows.
  switch ((head_dim + 15) / 16) {  // <= 16: the caller checks head_dim <= 256
#define PAGODA_ATTN_CASE(NC) \
  case NC: return attention_tiles<NC>(r, g, head_dim, scale, k, v, kv_head, block_table, scratch);
    PAGODA_ATTN_CASE(1) PAGODA_ATTN_CASE(2) PAGODA_ATTN_CASE(3) PAGODA_ATTN_CASE(4)
    PAGODA_ATTN_CASE(5) PAGODA_ATTN_CASE(6) PAGODA_ATTN_CASE(7) PAGODA_ATTN_CASE(8)
    PAGODA_ATTN_CASE(9) PAGODA_ATTN_CASE(10) PAGODA_ATTN_CASE(11) PAGODA_ATTN_CASE(12)
    PAGODA_ATTN_CASE(13) PAGODA_ATTN_CASE(14) PAGODA_ATTN_CASE(15) PAGODA_ATTN_CASE(16)
#undef PAGODA_ATTN_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
