// Paged attention with AVX-512 (ops.h attention_heads / attention_group; compiled with the
// AVX-512 flags, called only after detail::ops_have_avx512()). One call covers the query rows of
// one sequence (n_q tokens) for n_kv consecutive KV heads (g query heads each), in one pass
// over the keys with an online softmax:
//   - keys go in tiles of 16 at indices 16t.. (a key's place never depends on the batch); the
//     slots of a tile are walked once and shared by all heads, and the next tile's K/V rows of
//     the call's heads are prefetched (each slot's heads are adjacent in the pool, so a call
//     over several heads reads whole runs of memory instead of one head row in every slot);
//   - per head, the tile's K rows are converted once to F32 (F16, F32 or Q8_0 pools; read and
//     converted in registers instead where one block of 4 query heads uses them: decode with 4
//     query heads per KV head) and dotted with up to 4 query heads of a token at a time (4 heads
//     x 4 keys or 2 x 8 or 1 x 16 partial sums in registers, finished by reduce16's cross-lane
//     folding); V rows likewise;
//   - per query row, the tile's scores update a running max m, a 16-lane running sum l and the
//     output o (held in the output row): when m grows, l and o are first scaled by e^(m_old -
//     m_new), then p = e^(s - m) is added to l and p_i * V_i to o key by key, in index order;
//   - at the end o is divided by l's 16 lanes folded in a fixed order.
// Every row's arithmetic (its accumulator, its reduction tree, the tile boundaries, the order of
// keys) is the same whatever rows, heads or threads run with it: results are batch invariant.
// Against the scalar kernel (ops.cpp, softmax first, then V) the sums run in another order: the
// tests hold them within 1e-5 for outputs in [-1, 1].
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/simd_ops.h"

namespace pagoda::cpu::detail {
namespace {

constexpr int kTile = 16;  // keys per tile

// Where the next tile's rows are prefetched to: L2. A call's heads together prefetch the next
// tile of all of them (8 KV heads of 128 f16 values: 64 KiB of K and V) while the current one
// is computed, more than an L1 holds: prefetched into L1 the rows evicted one another before
// their use (16 sequences' decode at 1-2k contexts ran at half the speed).
constexpr _mm_hint kPrefetchHint = _MM_HINT_T1;

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// Lane k of the result = the sum of the 16 lanes of a[k] (16 dot products finished at once):
// pairs of vectors are folded by halves, quarters, then within 128-bit lanes, and a final
// permute puts accumulator k in lane k. Every accumulator goes through the same tree of adds
// whatever its index: ((q0 + q2) + (q1 + q3)) over quarters, likewise within them.
inline __m512 reduce16(const __m512* a) {
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

// The head rows of one KV head for the tile's keys (slot byte offsets `offs`, nk of them) as F32
// in `tile` (16 rows of NC*16 floats); rows past nk are zero. The same head's rows of the next
// tile (offsets `next`, n_next of them) are prefetched along the way, one row per row converted,
// so the prefetches spread over the work instead of queueing at once.
template <int NC>
inline void load_tile(const KvPool& p, int64_t head_off, const int64_t* offs, int nk, const int64_t* next, int n_next,
                      __mmask16 last, float* tile) {
  const auto* base = static_cast<const uint8_t*>(p.data) + head_off;
  const int64_t head_bytes = p.head_bytes();
  for (int k = 0; k < kTile; ++k) {
    float* dst = tile + k * NC * 16;
    if (k < n_next)
      for (int64_t b = 0; b < head_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(base + next[k] + b), kPrefetchHint);
    if (k < nk) {
      load_head<NC>(p.type, p.head_dim, base + offs[k], last, dst);
    } else {
      for (int c = 0; c < NC; ++c) _mm512_storeu_ps(dst + c * 16, _mm512_setzero_ps());
    }
  }
}

// The slots of keys [i0, i0 + nk).
inline void tile_slots(const AttnRows& r, const int32_t* table, int bs, int i0, int nk, int64_t* slots) {
  int blk = i0 / bs, in_blk = i0 % bs;  // walked forward: no division per key
  for (int k = 0; k < nk; ++k) {
    const int64_t slot = i0 + k >= r.tail_base ? attention_slot(r, table, bs, i0 + k)
                                               : static_cast<int64_t>(table[blk]) * bs + in_blk;
    slots[k] = slot;
    if (++in_blk == bs) in_blk = 0, ++blk;
  }
}

// Chunk c (16 values, as F32) of a head row, read straight from a pool of each element type or
// from a converted tile (RowF32: lanes outside `last` of the final chunk read as zero). The
// values are exactly load_head's, so a row gives the same bits read either way.
struct RowF32 {
  static __m512 chunk(const uint8_t* row, int c, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c * 16);
  }
};
struct RowF16 {
  static __m512 chunk(const uint8_t* row, int c, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + c * 16));
  }
};
template <int G>  // Q8_0 in groups of G = 16 or 32 (whole chunks)
struct RowQ8 {
  static __m512 chunk(const uint8_t* row, int c, __mmask16) {
    const uint8_t* g = row + (c * 16 / G) * (G + 2);
    uint16_t dh;
    std::memcpy(&dh, g, 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 2 + c * 16 % G));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(_cvtsh_ss(dh)));
  }
};

// Calls f(Row{}) with the reader of a pool's head rows; false (f not called) where rows go
// through a tile only (Q8_0 in groups of 8).
template <class F>
inline bool with_row_reader(GgmlType type, int head_dim, F&& f) {
  if (type == GgmlType::F16) return f(RowF16{}), true;
  if (type == GgmlType::F32) return f(RowF32{}), true;
  if (kv_q8_group(head_dim) == 32) return f(RowQ8<32>{}), true;
  if (kv_q8_group(head_dim) == 16) return f(RowQ8<16>{}), true;
  return false;
}

// Scores of RB query heads (q rows at q[0..RB)) against the tile's keys (head rows at
// rows[0..16), read by Row), scaled: s[r * 16 + k] for k < nk. 16 / RB keys per pass, so the
// RB x (16 / RB) partial sums stay in registers.
template <int NC, int RB, class Row>
inline void tile_scores(const float* const* q, const uint8_t* const* rows, __mmask16 last, int nk, float scale,
                        float* s) {
  constexpr int KB = 16 / RB;
  for (int k0 = 0; k0 < nk; k0 += KB) {
    __m512 acc[16];
#pragma GCC unroll 16
    for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int c = 0; c < NC; ++c) {
      const __mmask16 mc = c == NC - 1 ? last : 0xFFFF;
      __m512 qc[RB];
#pragma GCC unroll 4
      for (int r = 0; r < RB; ++r) qc[r] = _mm512_maskz_loadu_ps(mc, q[r] + c * 16);
#pragma GCC unroll 16
      for (int kk = 0; kk < KB; ++kk) {
        const __m512 kv = Row::chunk(rows[k0 + kk], c, mc);
#pragma GCC unroll 4
        for (int r = 0; r < RB; ++r) acc[r * KB + kk] = _mm512_fmadd_ps(qc[r], kv, acc[r * KB + kk]);
      }
    }
    alignas(64) float part[16];
    _mm512_store_ps(part, _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale)));
    for (int r = 0; r < RB; ++r) std::memcpy(s + r * 16 + k0, part + r * KB, sizeof(float) * KB);
  }
}

// o[r] = o[r] * corr[r] + sum over keys k < nk of p[r * 16 + k] * V row k (rows[k], read by Row),
// in key order, for RB output rows; blocks of 16 / RB chunks stay in registers, so each chunk of
// a V row is read once per call.
template <int NC, int RB, class Row>
inline void tile_values(float* const* o, const float* p, const float* corr, const uint8_t* const* rows,
                        __mmask16 last, int nk) {
  constexpr int CB = 16 / RB < NC ? 16 / RB : NC;
#pragma GCC unroll 16
  for (int c0 = 0; c0 < NC; c0 += CB) {
    __m512 acc[RB][CB];
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m512 cr = _mm512_set1_ps(corr[r]);
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c)
        if (c0 + c < NC) acc[r][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(c0 + c == NC - 1 ? last : 0xFFFF, o[r] + (c0 + c) * 16), cr);
    }
    for (int k = 0; k < nk; ++k) {
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c) {
        if (c0 + c >= NC) continue;
        const __m512 vv = Row::chunk(rows[k], c0 + c, c0 + c == NC - 1 ? last : 0xFFFF);
#pragma GCC unroll 4
        for (int r = 0; r < RB; ++r) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * 16 + k]), vv, acc[r][c]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < CB; ++c)
        if (c0 + c < NC) _mm512_mask_storeu_ps(o[r] + (c0 + c) * 16, c0 + c == NC - 1 ? last : 0xFFFF, acc[r][c]);
  }
}

// Online-softmax step of one query row for a tile: s (16 scores, the first nv valid) becomes p,
// and the row's max m, lane sums l and output scale corr are updated.
inline void softmax_step(float* s, int nv, float& m, float* l, float& corr) {
  const __mmask16 valid = lanes(nv);
  const __m512 sv = _mm512_maskz_loadu_ps(valid, s);
  const float tmax = _mm512_mask_reduce_max_ps(valid, sv);
  __m512 lv = _mm512_loadu_ps(l);
  corr = 1.0f;
  if (tmax > m) {
    corr = m == -INFINITY ? 0.0f : _mm512_cvtss_f32(simd_exp<F32x16>(_mm512_set1_ps(m - tmax)));
    m = tmax;
    lv = _mm512_mul_ps(lv, _mm512_set1_ps(corr));
  }
  const __m512 pv = _mm512_maskz_mov_ps(valid, simd_exp<F32x16>(_mm512_sub_ps(sv, _mm512_set1_ps(m))));
  _mm512_storeu_ps(l, _mm512_add_ps(lv, pv));
  _mm512_storeu_ps(s, pv);
}

// One token's g query heads of one KV head go in blocks of 4, 2 and 1 heads. with_block_heads
// calls f(std::integral_constant<int, RB>{}) for the block of rb heads, RB = rb. Rows read
// straight from a pool come in blocks of 4 only (see `direct` below): the other block sizes are
// instantiated for the F32 rows of a tile alone, which keeps this file's compile time down.
template <class Row, class F>
inline void with_block_heads(int rb, F&& f) {
  if constexpr (std::is_same_v<Row, RowF32>) {
    if (rb == 4) f(std::integral_constant<int, 4>{});
    else if (rb == 2) f(std::integral_constant<int, 2>{});
    else f(std::integral_constant<int, 1>{});
  } else {
    f(std::integral_constant<int, 4>{});
  }
}

// The scores (then the softmax step) of the block of rb heads from head j.
template <int NC, class Row>
inline void block_scores(int rb, const float* const* q, const uint8_t* const* rows, __mmask16 last, int nv,
                         float scale, float* s, float* m, float* l, float* corr) {
  with_block_heads<Row>(rb, [&](auto RB) { tile_scores<NC, decltype(RB)::value, Row>(q, rows, last, nv, scale, s); });
  for (int b = 0; b < rb; ++b) softmax_step(s + b * 16, nv, m[b], l + b * 16, corr[b]);
}

// The V sums of the block of rb heads from head j.
template <int NC, class Row>
inline void block_values(int rb, float* const* o, const float* p, const float* corr, const uint8_t* const* rows,
                         __mmask16 last, int nv) {
  with_block_heads<Row>(rb, [&](auto RB) { tile_values<NC, decltype(RB)::value, Row>(o, p, corr, rows, last, nv); });
}

inline int block_heads(int left) { return left >= 4 ? 4 : left >= 2 ? 2 : 1; }

// The head rows of the tile's keys for one KV head: straight from the pool (`direct`, where the
// type has a row reader), else converted into `tile`. Calls f(Row{}, rows) with rows[0..16) (rows past nk
// repeat row 0: their scores are never used). Prefetches the head's rows of the next tile.
template <int NC, class F>
inline void with_head_rows(const KvPool& p, int64_t head_off, const int64_t* offs, int nk, const int64_t* next,
                           int n_next, bool direct, __mmask16 last, float* tile, F&& f) {
  const uint8_t* rows[kTile];
  const auto* base = static_cast<const uint8_t*>(p.data) + head_off;
  const bool done = direct && with_row_reader(p.type, p.head_dim, [&](auto row) {
    for (int k = 0; k < kTile; ++k) rows[k] = base + offs[k < nk ? k : 0];
    const int64_t head_bytes = p.head_bytes();
    for (int k = 0; k < n_next; ++k)
      for (int64_t b = 0; b < head_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(base + next[k] + b), kPrefetchHint);
    f(row, rows);
  });
  if (done) return;
  load_tile<NC>(p, head_off, offs, nk, next, n_next, last, tile);
  for (int k = 0; k < kTile; ++k) rows[k] = reinterpret_cast<const uint8_t*>(tile + k * NC * 16);
  f(RowF32{}, rows);
}

// NC = 16-float chunks per head (head_dim <= 16 * NC), a compile-time constant so the
// accumulators stay in registers.
template <int NC>
void attention_pass(const AttnRows& r, int g, int n_kv, int head_dim, float scale, const KvPool& k, const KvPool& v,
                    int kv_head0, const int32_t* table, float* scratch) {
  const __mmask16 last = lanes(head_dim - (NC - 1) * 16);
  const int max_ctx = r.n_ctx + r.n_q - 1;  // the last row's context
  const int rows = r.n_q * g;               // query rows per KV head
  float* tile = scratch;                    // [16][NC * 16]: one head's K, then its V
  float* s = tile + kTile * NC * 16;        // [rows][16]: a tile's scores, then p
  float* corr = s + rows * 16;              // [rows]
  float* m = corr + rows;                   // [n_kv][rows]
  float* l = m + n_kv * rows;               // [n_kv][rows][16]
  for (int i = 0; i < n_kv * rows; ++i) m[i] = -INFINITY;
  std::memset(l, 0, sizeof(float) * 16 * static_cast<size_t>(n_kv * rows));
  for (int qi = 0; qi < r.n_q; ++qi)
    std::memset(r.out + qi * r.out_stride, 0, sizeof(float) * static_cast<size_t>(n_kv) * g * head_dim);
  const int64_t kh = k.head_bytes(), vh = v.head_bytes(), krow = k.row_bytes(), vrow = v.row_bytes();
  int64_t slots[2][kTile];
  tile_slots(r, table, k.block_size, 0, std::min(kTile, max_ctx), slots[0]);
  for (int i0 = 0, t = 0; i0 < max_ctx; i0 += kTile, t ^= 1) {
    const int nk = std::min(kTile, max_ctx - i0), nk_next = std::min(kTile, max_ctx - i0 - kTile);
    const int64_t* cur = slots[t];
    int64_t* next = slots[t ^ 1];
    if (nk_next > 0) tile_slots(r, table, k.block_size, i0 + kTile, nk_next, next);
    int64_t koffs[kTile], voffs[kTile], knext[kTile], vnext[kTile];
    for (int i = 0; i < nk; ++i) koffs[i] = cur[i] * krow, voffs[i] = cur[i] * vrow;
    for (int i = 0; i < nk_next; ++i) knext[i] = next[i] * krow, vnext[i] = next[i] * vrow;
    const int q0 = std::max(0, i0 - r.n_ctx + 1);  // the first token that sees key i0
    // Rows straight from the pool where one block of 4 query heads reads the tile (decode with
    // 4 query heads per KV head, the common GQA ratio): each value is converted once anyway.
    const bool direct = q0 == r.n_q - 1 && g == 4;
    for (int h = 0; h < n_kv; ++h) {
      const int64_t head = kv_head0 + h;
      float* mh = m + h * rows;
      float* lh = l + static_cast<int64_t>(h) * rows * 16;
      with_head_rows<NC>(k, head * kh, koffs, nk, knext, nk_next, direct, last, tile, [&](auto row, const uint8_t* const* kr) {
        using Row = decltype(row);
        for (int qi = q0; qi < r.n_q; ++qi) {
          const int nv = std::min(kTile, r.n_ctx + qi - i0);
          const float* qrow = r.q + qi * r.q_stride + static_cast<int64_t>(h) * g * head_dim;
          for (int j = 0, rb; j < g; j += rb) {
            rb = block_heads(g - j);
            const float* q[4];
            for (int b = 0; b < rb; ++b) q[b] = qrow + static_cast<int64_t>(j + b) * head_dim;
            const int row = qi * g + j;
            block_scores<NC, Row>(rb, q, kr, last, nv, scale, s + row * 16, mh + row, lh + row * 16, corr + row);
          }
        }
      });
      with_head_rows<NC>(v, head * vh, voffs, nk, vnext, nk_next, direct, last, tile, [&](auto row, const uint8_t* const* vr) {
        using Row = decltype(row);
        for (int qi = q0; qi < r.n_q; ++qi) {
          const int nv = std::min(kTile, r.n_ctx + qi - i0);
          float* orow = r.out + qi * r.out_stride + static_cast<int64_t>(h) * g * head_dim;
          for (int j = 0, rb; j < g; j += rb) {
            rb = block_heads(g - j);
            float* o[4];
            for (int b = 0; b < rb; ++b) o[b] = orow + static_cast<int64_t>(j + b) * head_dim;
            const int row = qi * g + j;
            block_values<NC, Row>(rb, o, s + row * 16, corr + row, vr, last, nv);
          }
        }
      });
    }
  }
  // o / l, l's lanes folded in a fixed order.
  for (int h = 0; h < n_kv; ++h)
    for (int qi = 0; qi < r.n_q; ++qi)
      for (int j = 0; j < g; ++j) {
        const float* lr = l + (static_cast<int64_t>(h) * rows + qi * g + j) * 16;
        const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(lr)));
        float* o = r.out + qi * r.out_stride + (static_cast<int64_t>(h) * g + j) * head_dim;
        for (int c = 0; c < NC; ++c) {
          const __mmask16 mk = c == NC - 1 ? last : 0xFFFF;
          _mm512_mask_storeu_ps(o + c * 16, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o + c * 16), inv));
        }
      }
}

}  // namespace

void attention_heads_avx512(const AttnRows& r, int g, int n_kv, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head0, const int32_t* block_table, float* scratch) {
  switch ((head_dim + 15) / 16) {  // <= 16: the caller checks head_dim <= 256
#define PAGODA_ATTN_CASE(NC) \
  case NC: return attention_pass<NC>(r, g, n_kv, head_dim, scale, k, v, kv_head0, block_table, scratch);
    PAGODA_ATTN_CASE(1) PAGODA_ATTN_CASE(2) PAGODA_ATTN_CASE(3) PAGODA_ATTN_CASE(4)
    PAGODA_ATTN_CASE(5) PAGODA_ATTN_CASE(6) PAGODA_ATTN_CASE(7) PAGODA_ATTN_CASE(8)
    PAGODA_ATTN_CASE(9) PAGODA_ATTN_CASE(10) PAGODA_ATTN_CASE(11) PAGODA_ATTN_CASE(12)
    PAGODA_ATTN_CASE(13) PAGODA_ATTN_CASE(14) PAGODA_ATTN_CASE(15) PAGODA_ATTN_CASE(16)
#undef PAGODA_ATTN_CASE
    default: return;
  }
}

void attention_group_avx512(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  attention_heads_avx512(r, g, 1, head_dim, scale, k, v, kv_head, block_table, scratch);
}

}  // namespace pagoda::cpu::detail
