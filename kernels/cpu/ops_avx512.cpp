// AVX-512 variants of the non-matmul ops (compiled with AVX-512 flags, called only after
// detail::ops_have_avx512()): the f16 conversions and the row kernels of simd_ops.h (RMSNorm,
// the silu gate, softmax; written once for both widths) at 16 lanes. Paged attention is
// attention_avx512.cpp's.
#include <immintrin.h>

#include <cstring>

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

}  // namespace pagoda::cpu::detail
