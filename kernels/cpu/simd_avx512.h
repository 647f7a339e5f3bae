// F32x16: the 16-lane float vector (AVX-512 F/BW/VL/DQ) in which the width-generic kernels
// (simd_ops.h, matmul_float_simd.h) are written; its 8-lane twin is simd_avx2.h. For the
// *_avx512.cpp files only, which kernels/cpu/CMakeLists.txt compiles with the AVX-512 flags.
// Everything is in an unnamed namespace, so each translation unit keeps its own copy built with
// its own flags (the reason matmul_internal.h gives for its `static inline`); the check below
// makes a file with other flags fail to compile instead.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "simd_avx512.h: include it only from the *_avx512.cpp files (compiled with the AVX-512 flags)"
#endif

#include <immintrin.h>

#include <cstdint>

#include "kernels/ggml_type.h"

namespace pagoda::cpu::detail {
namespace {

struct F32x16 {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kWidth = 16;
  // Activation rows per float-weight matmul call: 4 rows x 4 outputs keep 16 accumulators and 4
  // weight vectors in the 32 zmm registers.
  static constexpr int kFloatRows = 4;

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }

  // Lanes [0, n) for n in 1..15; masked loads read zeros elsewhere, masked stores leave the rest.
  static Mask tail(int64_t n) { return static_cast<Mask>((1u << n) - 1u); }
  static V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V keep(Mask m, V v) { return _mm512_maskz_mov_ps(m, v); }  // zero outside m

  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }

  // e^x's range reduction (simd_ops.h): vscalefps forms p * 2^n for any n, down to denormals
  // and 0, so x is clamped only to [kExpMin, kExpMax], where expf itself is 0 below / inf above.
  static constexpr float kExpMin = -104.0f, kExpMax = 88.7f;
  static V round_nearest(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale_pow2(V p, V n) { return _mm512_scalef_ps(p, n); }

  // 16 weights of a float-weight row (F32, F16 or BF16) from element k on, and the last rem < 16
  // of them by masked, zero-filling loads.
  template <GgmlType T>
  static V load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == GgmlType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k));
      return from_halves<T>(h);
    }
  }
  template <GgmlType T>
  static V load_w_tail(const uint8_t* row, int64_t k, int64_t rem) {
    if constexpr (T == GgmlType::F32) {
      return _mm512_maskz_loadu_ps(tail(rem), reinterpret_cast<const float*>(row) + k);
    } else {
      return from_halves<T>(_mm256_maskz_loadu_epi16(tail(rem), reinterpret_cast<const uint16_t*>(row) + k));
    }
  }
  static V load_tail(const float* x, int64_t rem) { return _mm512_maskz_loadu_ps(tail(rem), x); }

 private:
  template <GgmlType T>
  static V from_halves(__m256i h) {
    if constexpr (T == GgmlType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16 -> f32 is a shift
  }
};

}  // namespace
}  // namespace pagoda::cpu::detail
