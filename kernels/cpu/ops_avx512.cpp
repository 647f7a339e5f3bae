// AVX-512 variants of the non-matmul ops (compiled with AVX-512 flags, called only after
// detail::ops_have_avx512()). Each row is reduced with 16-lane accumulators folded by
// _mm512_reduce_add_ps: a fixed order, independent of the batch.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/ops_impl.h"

namespace pagoda::cpu::detail {
namespace {

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << remaining) - 1u);
}

// e^x for 16 lanes: 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p the degree-7 Taylor polynomial
// (truncation error below 1e-8 relative, i.e. within about 1 ulp of expf).
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 16 (or fewer, masked) elements of a KV row as floats.
inline __m512 load_kv(const void* base, GgmlType type, int64_t off, __mmask16 m) {
  if (type == GgmlType::F32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + off);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + off);
  return _mm512_cvtph_ps(h);
}

}  // namespace

void rms_norm_row_avx512(const float* x, const float* w, float eps, float* y, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const float scale = 1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / static_cast<float>(n) + eps);
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s),
                                   _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

void silu_mul_row_avx512(const float* gate, const float* up, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void softmax_row_avx512(float* x, int64_t n) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - i), x + i));
  const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
    _mm512_mask_storeu_ps(x + i, m, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

void attention_group_avx512(const float* q, int g, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head, const int32_t* block_table, int n_ctx,
                            float* scratch, float* out) {
  constexpr int kMaxChunks = 16;  // head_dim <= 256 (the caller checks): K/V row in registers
  const int nc = (head_dim + 15) / 16;
  const __mmask16 last = tail_mask(head_dim - (nc - 1) * 16);
  float* scores = scratch;  // [g][n_ctx]
  const int bs = k.block_size;
  const int64_t row = k.row_elems();
  __m512 kc[kMaxChunks];
  for (int i = 0; i < n_ctx; ++i) {
    const int64_t slot = static_cast<int64_t>(block_table[i / bs]) * bs + i % bs;
    const int64_t off = slot * row + static_cast<int64_t>(kv_head) * head_dim;
    for (int c = 0; c < nc; ++c) kc[c] = load_kv(k.data, k.type, off + c * 16, c == nc - 1 ? last : 0xFFFF);
    for (int j = 0; j < g; ++j) {
      const float* qj = q + static_cast<int64_t>(j) * head_dim;
      __m512 acc = _mm512_setzero_ps();
      for (int c = 0; c < nc; ++c)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(c == nc - 1 ? last : 0xFFFF, qj + c * 16), kc[c], acc);
      scores[static_cast<int64_t>(j) * n_ctx + i] = _mm512_reduce_add_ps(acc) * scale;
    }
  }
  for (int j = 0; j < g; ++j) softmax_row_avx512(scores + static_cast<int64_t>(j) * n_ctx, n_ctx);
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(g) * head_dim);
  for (int i = 0; i < n_ctx; ++i) {
    const int64_t slot = static_cast<int64_t>(block_table[i / bs]) * bs + i % bs;
    const int64_t off = slot * row + static_cast<int64_t>(kv_head) * head_dim;
    for (int c = 0; c < nc; ++c) kc[c] = load_kv(v.data, v.type, off + c * 16, c == nc - 1 ? last : 0xFFFF);
    for (int j = 0; j < g; ++j) {
      const __m512 w = _mm512_set1_ps(scores[static_cast<int64_t>(j) * n_ctx + i]);
      float* oj = out + static_cast<int64_t>(j) * head_dim;
      for (int c = 0; c < nc; ++c) {
        const __mmask16 m = c == nc - 1 ? last : 0xFFFF;
        _mm512_mask_storeu_ps(oj + c * 16, m, _mm512_fmadd_ps(w, kc[c], _mm512_maskz_loadu_ps(m, oj + c * 16)));
      }
    }
  }
}

}  // namespace pagoda::cpu::detail
