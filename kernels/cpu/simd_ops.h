// The element-wise and row kernels of ops.h / ops_window_softcap.h written once for any vector
// width: S is F32x8 (simd_avx2.h, included by ops_avx2.cpp) or F32x16 (simd_avx512.h, by
// ops_avx512.cpp), and each ISA's file instantiates them under its own flags. A row goes in
// whole vectors of S::kWidth lanes and one masked tail, every element through the same vector
// arithmetic wherever it sits; reductions keep one accumulator per lane, folded by S::hsum in a
// fixed order, so a row's result never depends on its batch. The scalar references are the
// *_portable functions of ops.cpp / ops_window_softcap.cpp. In an unnamed namespace for the
// reason simd_avx2.h gives (include it after the ISA's simd_*.h).
#pragma once

#include <cmath>
#include <cstdint>

namespace pagoda::cpu::detail {
namespace {

// e^x: 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p the degree-7 Taylor polynomial (truncation
// error below 1e-8 relative: about 1 ulp of expf). x is first clamped to [S::kExpMin,
// S::kExpMax], the range in which S::scale_pow2 forms 2^n (AVX2 from exponent bits, so only
// normal powers; AVX-512 with vscalefps, down to 0).
template <class S>
inline typename S::V simd_exp(typename S::V x) {
  using V = typename S::V;
  x = S::max(S::min(x, S::set1(S::kExpMax)), S::set1(S::kExpMin));
  const V n = S::round_nearest(S::mul(x, S::set1(1.44269504088896341f)));
  V r = S::fnmadd(n, S::set1(0.693359375f), x);
  r = S::fnmadd(n, S::set1(-2.12194440e-4f), r);
  V p = S::set1(1.0f / 5040.0f);
  p = S::fmadd(p, r, S::set1(1.0f / 720.0f));
  p = S::fmadd(p, r, S::set1(1.0f / 120.0f));
  p = S::fmadd(p, r, S::set1(1.0f / 24.0f));
  p = S::fmadd(p, r, S::set1(1.0f / 6.0f));
  p = S::fmadd(p, r, S::set1(0.5f));
  p = S::fmadd(p, r, S::set1(1.0f));
  p = S::fmadd(p, r, S::set1(1.0f));
  return S::scale_pow2(p, n);
}

// cap * tanh(x / cap), as cap * (1 - 2 / (e^(2x/cap) + 1)) (exact at the limits; absolute error
// a few ulp of cap near 0).
template <class S>
inline typename S::V simd_softcap(typename S::V x, float cap) {
  const auto e = simd_exp<S>(S::mul(x, S::set1(2.0f / cap)));
  const auto t = S::sub(S::set1(1.0f), S::div(S::set1(2.0f), S::add(e, S::set1(1.0f))));
  return S::mul(t, S::set1(cap));
}

// g * sigmoid(t) * u, as g / (1 + e^-t) * u: silu (t = g) and tanh-GELU (t = 2 sqrt(2/pi) (g +
// 0.044715 g^3), since 0.5 (1 + tanh(a)) = 1 / (1 + e^-2a), with no cancellation near 0).
// simd_exp's clamp keeps e^-t finite: the result goes to g * u or to ~0 at the limits.
template <class S>
inline typename S::V simd_gated(typename S::V g, typename S::V t, typename S::V u) {
  const auto e = simd_exp<S>(S::sub(S::zero(), t));
  return S::mul(S::div(g, S::add(S::set1(1.0f), e)), u);
}

// out[i] = f(a[i], b[i]) over n elements. out may alias a or b.
template <class S, class F>
inline void simd_map2(const float* a, const float* b, float* out, int64_t n, F f) {
  constexpr int W = S::kWidth;
  int64_t i = 0;
  for (; i + W <= n; i += W) S::store(out + i, f(S::load(a + i), S::load(b + i)));
  if (i < n) {
    const auto m = S::tail(n - i);
    S::store(out + i, m, f(S::load(a + i, m), S::load(b + i, m)));
  }
}

template <class S>
inline void simd_silu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  simd_map2<S>(gate, up, out, n, [](auto g, auto u) { return simd_gated<S>(g, g, u); });
}

template <class S>
inline void simd_gelu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  simd_map2<S>(gate, up, out, n, [](auto g, auto u) {
    const auto g3 = S::mul(S::mul(g, g), g);
    const auto a = S::mul(S::set1(0.7978845608028654f), S::fmadd(S::set1(0.044715f), g3, g));
    return simd_gated<S>(g, S::add(a, a), u);
  });
}

template <class S>
inline void simd_softcap_row(float* x, float cap, int64_t n) {
  simd_map2<S>(x, x, x, n, [cap](auto v, auto) { return simd_softcap<S>(v, cap); });
}

// y = x / sqrt(mean(x^2) + eps) * w.
template <class S>
inline void simd_rms_norm_row(const float* x, const float* w, float eps, float* y, int64_t n) {
  constexpr int W = S::kWidth;
  auto acc = S::zero();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const auto v = S::load(x + i);
    acc = S::fmadd(v, v, acc);
  }
  if (i < n) {
    const auto v = S::load(x + i, S::tail(n - i));
    acc = S::fmadd(v, v, acc);
  }
  const auto s = S::set1(1.0f / std::sqrt(S::hsum(acc) / static_cast<float>(n) + eps));
  simd_map2<S>(x, w, y, n, [s](auto xv, auto wv) { return S::mul(S::mul(xv, s), wv); });
}

// In-place softmax of n > 0 values: max-subtracted exp, lane sums folded by S::hsum.
template <class S>
inline void simd_softmax_row(float* x, int64_t n) {
  constexpr int W = S::kWidth;
  auto mx = S::set1(-INFINITY);
  int64_t i = 0;
  for (; i + W <= n; i += W) mx = S::max(mx, S::load(x + i));
  float m = S::hmax(mx);
  for (int64_t t = i; t < n; ++t) m = std::fmax(m, x[t]);
  const auto vmax = S::set1(m);
  auto sum = S::zero();
  for (i = 0; i + W <= n; i += W) {
    const auto e = simd_exp<S>(S::sub(S::load(x + i), vmax));
    sum = S::add(sum, e);
    S::store(x + i, e);
  }
  if (i < n) {
    const auto mk = S::tail(n - i);
    const auto e = S::keep(mk, simd_exp<S>(S::sub(S::load(x + i, mk), vmax)));
    sum = S::add(sum, e);
    S::store(x + i, mk, e);
  }
  const auto inv = S::set1(1.0f / S::hsum(sum));
  simd_map2<S>(x, x, x, n, [inv](auto v, auto) { return S::mul(v, inv); });
}

}  // namespace
}  // namespace pagoda::cpu::detail
