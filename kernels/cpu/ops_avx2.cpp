// AVX2 + FMA + F16C kernels (compiled with the AVX2 flags, called only where the CPU has them):
// the gated activations and logit soft-capping of ops.h / ops_window_softcap.h (the row kernels
// of simd_ops.h, written once for both widths, at 8 lanes), and paged attention: the plain
// kernel of ops.h and the windowed / soft-capped one of ops_window_softcap.h in one tile loop.
// Keys go in tiles of 8, converted once to F32 (F16 / F32 / Q8_0 pools, K and V each by its own
// pool's type) and shared by every row and head of the group; per head and tile, 8 dot products
// finish together (reduce8). Every key sits in tile lane i % 8 whatever rows run together, each
// row's softmax and V sum run over its own keys in index order: a row's arithmetic never depends
// on its batch mates. The attention kernel differs in algorithm from attention_avx512.cpp's (one
// pass with an online softmax, over several KV heads per call), so the two stay apart.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/cpu/simd_ops.h"

namespace pagoda::cpu::detail {
namespace {

// Lane k of the result = the sum of the 8 lanes of a[k] (8 dot products finished at once), each
// key's lanes added in the same tree ((0+1)+(2+3)) + ((4+5)+(6+7)) whatever its lane.
inline __m256 reduce8(const __m256* a) {
  const __m256 h0 = _mm256_hadd_ps(a[0], a[1]), h1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h2 = _mm256_hadd_ps(a[4], a[5]), h3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 i0 = _mm256_hadd_ps(h0, h1), i1 = _mm256_hadd_ps(h2, h3);  // [k0..3 low | k0..3 high], k4..7
  return _mm256_add_ps(_mm256_permute2f128_ps(i0, i1, 0x20), _mm256_permute2f128_ps(i0, i1, 0x31));
}

// A Q8_0 head row of groups of G (8, 16 or 32; head_dim a multiple of G, so every chunk of 8 is
// whole): chunk c holds values 8c.. of group 8c / G times the group's scale (q * d, as
// kv_q8_dequantize computes them); chunks past head_dim are zero.
template <int NC, int G>
inline void load_q8_head(const uint8_t* src, float* dst) {
  constexpr int kChunks = G / 8;  // chunks of 8 values per group
#pragma GCC unroll 32
  for (int gi = 0; gi < NC / kChunks; ++gi) {
    const uint8_t* grp = src + gi * (G + 2);
    uint16_t dh;
    std::memcpy(&dh, grp, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
#pragma GCC unroll 4
    for (int c = 0; c < kChunks; ++c) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(grp + 2 + 8 * c));
      _mm256_storeu_ps(dst + (gi * kChunks + c) * 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
#pragma GCC unroll 4
  for (int c = NC / kChunks * kChunks; c < NC; ++c) _mm256_storeu_ps(dst + c * 8, _mm256_setzero_ps());
}

// One head row at `src` (the pool's element type) as NC*8 floats at dst; values past head_dim
// are zero. Q8_0 values are q * d, as kv_q8_dequantize computes them.
template <int NC>
inline void load_head(GgmlType type, int head_dim, const uint8_t* src, float* dst) {
  const int full = head_dim / 8;  // whole chunks of 8
  if (type == GgmlType::F16) {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
#pragma GCC unroll 32
    for (int c = 0; c < NC; ++c) {
      if (c < full) {
        _mm256_storeu_ps(dst + c * 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + c * 8))));
      } else {
        alignas(16) uint16_t part[8] = {};
        std::memcpy(part, h + c * 8, sizeof(uint16_t) * static_cast<size_t>(head_dim - c * 8));
        _mm256_storeu_ps(dst + c * 8, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(part))));
      }
    }
  } else if (type == GgmlType::F32) {
    const auto* f = reinterpret_cast<const float*>(src);
#pragma GCC unroll 32
    for (int c = 0; c < NC; ++c)
      _mm256_storeu_ps(dst + c * 8, c < full ? _mm256_loadu_ps(f + c * 8) : _mm256_maskload_ps(f + c * 8, F32x8::tail(head_dim - c * 8)));
  } else if (kv_q8_group(head_dim) == 32) {
    load_q8_head<NC, 32>(src, dst);
  } else if (kv_q8_group(head_dim) == 16) {
    load_q8_head<NC, 16>(src, dst);
  } else {
    load_q8_head<NC, 8>(src, dst);
  }
}

// Converts the rows of keys [i0, i0 + 8) of one KV head to F32 in `tile` (8 rows of NC*8
// floats); rows outside [lo, hi) are zero (never read into a result). The next tile's rows are
// prefetched into L2 along the way, one per row converted (a head row is a short piece of each
// slot, a stride the hardware prefetchers follow late).
template <int NC>
inline void load_tile(const AttnRows& r, const KvPool& p, int kv_head, const int32_t* block_table, int i0, int lo,
                      int hi, float* tile) {
  const int bs = p.block_size;
  const int64_t head_off = static_cast<int64_t>(kv_head) * p.head_bytes(), row = p.row_bytes();
  const auto* base = static_cast<const uint8_t*>(p.data) + head_off;
  for (int k = 0; k < 8; ++k) {
    float* dst = tile + k * NC * 8;
    const int i = i0 + k;
    if (i + 8 < hi) {
      const uint8_t* ahead = base + attention_slot(r, block_table, bs, i + 8) * row;
      for (int64_t b = 0; b < p.head_bytes(); b += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T1);
    }
    if (i < lo || i >= hi) {
      for (int c = 0; c < NC; ++c) _mm256_storeu_ps(dst + c * 8, _mm256_setzero_ps());
      continue;
    }
    load_head<NC>(p.type, p.head_dim, base + attention_slot(r, block_table, bs, i) * row, dst);
  }
}

// What a row attends to: keys [first, ctx) for the row at context ctx.
struct Window {
  int window;  // 0: the whole context
  int first(int ctx) const { return window > 0 ? std::max(0, ctx - window) : 0; }
};

// NC = 8-float chunks per head (head_dim <= 8 * NC), a compile-time constant so the dot
// product accumulators stay in registers.
template <int NC>
void attention_tiles(const AttnRows& r, int g, int head_dim, float scale, Window win, float softcap, const KvPool& k,
                     const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  const int last_ctx = r.n_ctx + r.n_q - 1;            // the last row's context
  const int lo = win.first(r.n_ctx);                   // the first key any row sees
  const int64_t row_scores = static_cast<int64_t>(g) * last_ctx;
  float* scores = scratch;                             // [n_q][g][<= last_ctx], key i at i - first
  float* tile = scratch + r.n_q * row_scores;          // [8][NC * 8]
  const int full = head_dim / 8;
  const __m256i qmask = F32x8::tail(head_dim - full * 8 > 0 ? head_dim - full * 8 : 8);
  const __m256 vscale = _mm256_set1_ps(scale);
  const int t0 = lo / 8 * 8;  // tiles start at multiples of 8: key i is always lane i % 8
  // Scores: each tile of 8 keys is converted once for every row and head that sees it.
  for (int i0 = t0; i0 < last_ctx; i0 += 8) {
    load_tile<NC>(r, k, kv_head, block_table, i0, lo, last_ctx, tile);
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi, first = win.first(ctx);
      if (i0 >= ctx || i0 + 8 <= first) continue;
      for (int j = 0; j < g; ++j) {
        const float* qj = r.q + qi * r.q_stride + static_cast<int64_t>(j) * head_dim;
        __m256 acc[8];
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; ++kk) acc[kk] = _mm256_setzero_ps();
#pragma GCC unroll 32
        for (int c = 0; c < NC; ++c) {
          const __m256 qc = c < full ? _mm256_loadu_ps(qj + c * 8) : _mm256_maskload_ps(qj + c * 8, qmask);
#pragma GCC unroll 8
          for (int kk = 0; kk < 8; ++kk) acc[kk] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(tile + (kk * NC + c) * 8), acc[kk]);
        }
        __m256 s = _mm256_mul_ps(reduce8(acc), vscale);
        if (softcap > 0) s = simd_softcap<F32x8>(s, softcap);
        float* srow = scores + qi * row_scores + static_cast<int64_t>(j) * last_ctx;  // key i at srow[i - first]
        if (i0 >= first && i0 + 8 <= ctx) {
          _mm256_storeu_ps(srow + (i0 - first), s);
        } else {
          alignas(32) float part[8];
          _mm256_store_ps(part, s);
          for (int kk = std::max(0, first - i0); kk < std::min(8, ctx - i0); ++kk) srow[i0 + kk - first] = part[kk];
        }
      }
    }
  }
  for (int qi = 0; qi < r.n_q; ++qi) {
    const int ctx = r.n_ctx + qi, first = win.first(ctx);
    for (int j = 0; j < g; ++j) simd_softmax_row<F32x8>(scores + qi * row_scores + static_cast<int64_t>(j) * last_ctx, ctx - first);
    std::memset(r.out + qi * r.out_stride, 0, sizeof(float) * static_cast<size_t>(g) * head_dim);
  }
  // Outputs: weighted V rows, accumulated in index order per row and head, in blocks of up to
  // 8 chunks held in registers.
  for (int i0 = t0; i0 < last_ctx; i0 += 8) {
    load_tile<NC>(r, v, kv_head, block_table, i0, lo, last_ctx, tile);
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi, first = win.first(ctx);
      const int k0 = std::max(i0, first), k1 = std::min(i0 + 8, ctx);
      if (k0 >= k1) continue;
      for (int j = 0; j < g; ++j) {
        float* oj = r.out + qi * r.out_stride + static_cast<int64_t>(j) * head_dim;
        const float* w = scores + qi * row_scores + static_cast<int64_t>(j) * last_ctx;  // key i at w[i - first]
#pragma GCC unroll 4
        for (int cb = 0; cb < NC; cb += 8) {
          __m256 acc[8];
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c)
            if (cb + c < NC) acc[c] = cb + c < full ? _mm256_loadu_ps(oj + (cb + c) * 8) : _mm256_maskload_ps(oj + (cb + c) * 8, qmask);
          for (int i = k0; i < k1; ++i) {
            const __m256 wk = _mm256_set1_ps(w[i - first]);
            const float* vr = tile + (i - i0) * NC * 8;
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c)
              if (cb + c < NC) acc[c] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(vr + (cb + c) * 8), acc[c]);
          }
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) {
            if (cb + c >= NC) continue;
            if (cb + c < full) _mm256_storeu_ps(oj + (cb + c) * 8, acc[c]);
            else _mm256_maskstore_ps(oj + (cb + c) * 8, qmask, acc[c]);
          }
        }
      }
    }
  }
}

}  // namespace

void silu_mul_row_avx2(const float* gate, const float* up, float* out, int64_t n) {
  simd_silu_mul_row<F32x8>(gate, up, out, n);
}

void gelu_mul_row_avx2(const float* gate, const float* up, float* out, int64_t n) {
  simd_gelu_mul_row<F32x8>(gate, up, out, n);
}

void softcap_row_avx2(float* x, float cap, int64_t n) { simd_softcap_row<F32x8>(x, cap, n); }

void attention_group_avx2(const AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                          const KvPool& k, const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  const Window win{window};
  switch ((head_dim + 7) / 8) {  // <= 32: the caller checks head_dim <= 256
#define PAGODA_ATTN_CASE(NC) \
  case NC: return attention_tiles<NC>(r, g, head_dim, scale, win, softcap, k, v, kv_head, block_table, scratch);
    PAGODA_ATTN_CASE(1) PAGODA_ATTN_CASE(2) PAGODA_ATTN_CASE(3) PAGODA_ATTN_CASE(4)
    PAGODA_ATTN_CASE(5) PAGODA_ATTN_CASE(6) PAGODA_ATTN_CASE(7) PAGODA_ATTN_CASE(8)
    PAGODA_ATTN_CASE(9) PAGODA_ATTN_CASE(10) PAGODA_ATTN_CASE(11) PAGODA_ATTN_CASE(12)
    PAGODA_ATTN_CASE(13) PAGODA_ATTN_CASE(14) PAGODA_ATTN_CASE(15) PAGODA_ATTN_CASE(16)
    PAGODA_ATTN_CASE(17) PAGODA_ATTN_CASE(18) PAGODA_ATTN_CASE(19) PAGODA_ATTN_CASE(20)
    PAGODA_ATTN_CASE(21) PAGODA_ATTN_CASE(22) PAGODA_ATTN_CASE(23) PAGODA_ATTN_CASE(24)
    PAGODA_ATTN_CASE(25) PAGODA_ATTN_CASE(26) PAGODA_ATTN_CASE(27) PAGODA_ATTN_CASE(28)
    PAGODA_ATTN_CASE(29) PAGODA_ATTN_CASE(30) PAGODA_ATTN_CASE(31) PAGODA_ATTN_CASE(32)
#undef PAGODA_ATTN_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
