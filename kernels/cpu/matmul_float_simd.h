// Float weights (F32, F16, BF16) times float activations, written once for any vector width:
// S is F32x8 (simd_avx2.h, from matmul_avx2.cpp) or F32x16 (simd_avx512.h, from
// matmul_avx512.cpp), each instantiated under its own ISA flags. One vector accumulator per
// (row, output) pair: acc = fma(w[k..k+W), x[k..k+W), acc) over k, the last partial chunk through
// zero-filled loads, then S::hsum's fixed horizontal sum, so a row's result does not depend on
// the batch. Kernels take S::kFloatRows rows x 4 outputs (the register budget of the width). BF16
// on CPUs with AVX512_BF16 goes to matmul_bf16_avx512.cpp instead. In an unnamed namespace for
// the reason simd_avx2.h gives (include it after the ISA's simd_*.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/matmul_internal.h"

namespace pagoda::cpu::detail {
namespace {

// R rows x C outputs. The main loop and the partial tail are written out separately (rather
// than through a shared helper) because that is the shape in which GCC keeps the accumulators
// in registers instead of storing them back every iteration.
template <class S, GgmlType T, int R, int C>
void float_kernel(const MatmulArgs& a, int64_t i0, int64_t o0) {
  using V = typename S::V;
  constexpr int W = S::kWidth;
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = S::zero();
  const uint8_t* w[C];
  for (int c = 0; c < C; ++c) w[c] = a.w + (o0 + c) * a.row_bytes;
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = a.x + (i0 + r) * a.k;
  const int64_t K = a.k;
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    V wv[C];
    for (int c = 0; c < C; ++c) wv[c] = S::template load_w<T>(w[c], k);
    for (int r = 0; r < R; ++r) {
      const V xv = S::load(x[r] + k);
      for (int c = 0; c < C; ++c) acc[r][c] = S::fmadd(wv[c], xv, acc[r][c]);
    }
  }
  if (k < K) {
    const int64_t rem = K - k;
    V wv[C];
    for (int c = 0; c < C; ++c) wv[c] = S::template load_w_tail<T>(w[c], k, rem);
    for (int r = 0; r < R; ++r) {
      const V xv = S::load_tail(x[r] + k, rem);
      for (int c = 0; c < C; ++c) acc[r][c] = S::fmadd(wv[c], xv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a.out[(i0 + r) * a.out_features + o0 + c] = S::hsum(acc[r][c]);
}

// Rows [i0, i1) x outputs [o0, o0 + C): S::kFloatRows rows per kernel call, then the rest.
template <class S, GgmlType T, int C>
void float_rows(const MatmulArgs& a, int64_t i0, int64_t i1, int64_t o0) {
  constexpr int R = S::kFloatRows;
  static_assert(R >= 1 && R <= 4, "the rest below covers up to 3 rows");
  int64_t i = i0;
  for (; i + R <= i1; i += R) float_kernel<S, T, R, C>(a, i, o0);
  const int64_t rest = i1 - i;  // < R
  if constexpr (R > 3)
    if (rest == 3) return float_kernel<S, T, 3, C>(a, i, o0);
  if constexpr (R > 2)
    if (rest == 2) return float_kernel<S, T, 2, C>(a, i, o0);
  if (rest == 1) float_kernel<S, T, 1, C>(a, i, o0);
}

template <class S, GgmlType T>
void float_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Rows in chunks whose activations fit in about 512 KiB of L2, so each weight row is read
  // from memory once per chunk rather than once per S::kFloatRows rows.
  const int64_t chunk = std::max<int64_t>(4, (512 * 1024 / (a.k * 4)) / 4 * 4);
  for (int64_t i0 = 0; i0 < a.n; i0 += chunk) {
    const int64_t i1 = std::min(a.n, i0 + chunk);
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) float_rows<S, T, 4>(a, i0, i1, o);
    for (; o < o_end; ++o) float_rows<S, T, 1>(a, i0, i1, o);
  }
}

}  // namespace
}  // namespace pagoda::cpu::detail
