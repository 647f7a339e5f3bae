// BF16 weights on CPUs with AVX512_BF16: vdpbf16ps dot products, for decode and prefill alike.
//
// Each activation row is rounded to bf16 once per call (convert_rows_bf16_avx512, called by
// matmul.cpp; rows zero-padded to a multiple of 32), then one vdpbf16ps advances 16 fp32 lanes
// of a (row, output) pair by 32 products: twice the products per instruction of the f32 FMA
// kernel, with no bf16 -> f32 widening of the weights. The products of two bf16 values are exact
// in fp32, so the only precision lost against the f32 kernel is the rounding of x to bf16
// (relative 2^-9 per element; the matmul test allows for it).
//
// Batch invariance: every pair runs the same instruction sequence (its own accumulator over k in
// 32-element steps, masked weights in the last partial step, then a fixed horizontal sum)
// whatever the number of rows, the split or the micro-kernel shape, so n = 1 (decode) and
// n = 512 (prefill) give bit-identical rows.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_internal.h"

#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::cpu::detail {

namespace {

// R rows x C outputs over all of k.
template <int R, int C>
void bf16_kernel(const MatmulArgs& a, int64_t i0, int64_t o0) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const uint16_t* w[C];
  for (int c = 0; c < C; ++c) w[c] = reinterpret_cast<const uint16_t*>(a.w + (o0 + c) * a.row_bytes);
  const uint16_t* x[R];
  for (int r = 0; r < R; ++r) x[r] = a.xb + (i0 + r) * a.xb_k;
  const int64_t K = a.k;
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh wv[C];
    for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_loadu_si512(w[c] + k);
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_load_si512(x[r] + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[c], xv);
    }
  }
  if (k < K) {
    // Masked (zeroed) weights past k: the padding of x is zero too, and 0 * 0 adds nothing.
    const int rest = static_cast<int>(K - k);
    const __mmask32 mask = rest >= 32 ? ~__mmask32(0) : (__mmask32(1) << rest) - 1;
    __m512bh wv[C];
    for (int c = 0; c < C; ++c) wv[c] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w[c] + k);
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_load_si512(x[r] + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[c], xv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a.out[(i0 + r) * a.out_features + o0 + c] = _mm512_reduce_add_ps(acc[r][c]);
}

template <int C>
void bf16_rows(const MatmulArgs& a, int64_t i0, int64_t i1, int64_t o0) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) bf16_kernel<4, C>(a, i, o0);
  switch (i1 - i) {
    case 3: bf16_kernel<3, C>(a, i, o0); break;
    case 2: bf16_kernel<2, C>(a, i, o0); break;
    case 1: bf16_kernel<1, C>(a, i, o0); break;
    default: break;
  }
}

}  // namespace

void convert_rows_bf16_avx512(const float* x, int64_t k, int64_t k_pad, int64_t rows, uint16_t* y) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* xi = x + i * k;
    uint16_t* yi = y + i * k_pad;
    for (int64_t j = 0; j < k_pad; j += 32) {
      const int64_t left = k - j;
      const __mmask16 m0 = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      const __mmask16 m1 = left >= 32 ? __mmask16(0xFFFF) : left <= 16 ? __mmask16(0) : __mmask16((1u << (left - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xi + j), hi = _mm512_maskz_loadu_ps(m1, xi + j + 16);
      _mm512_store_si512(yi + j, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));  // rounds to nearest even
    }
  }
}

void matmul_bf16_dot_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Rows in chunks whose bf16 activations fill about half of L2, so the weights of a group of
  // outputs are read from memory once per chunk and from L1 for each group of rows.
  const int64_t half_l2 = static_cast<int64_t>(cpu_caches().l2 / 2);
  const int64_t chunk = std::max<int64_t>(4, half_l2 / (a.xb_k * 2) / 4 * 4);
  for (int64_t i0 = 0; i0 < a.n; i0 += chunk) {
    const int64_t i1 = std::min(a.n, i0 + chunk);
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) bf16_rows<4>(a, i0, i1, o);
    for (; o < o_end; ++o) bf16_rows<1>(a, i0, i1, o);
  }
}

}  // namespace pagoda::cpu::detail
