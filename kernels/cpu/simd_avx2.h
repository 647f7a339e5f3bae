// F32x8: the 8-lane float vector (AVX2 + FMA + F16C) in which the width-generic kernels
// (simd_ops.h, matmul_float_simd.h) are written; its 16-lane twin is simd_avx512.h. For the
// *_avx2.cpp files only, which kernels/cpu/CMakeLists.txt compiles with the AVX2 flags.
// Everything is in an unnamed namespace, so each translation unit keeps its own copy built with
// its own flags and an AVX-512 build of these functions can never be linked into AVX2 code (the
// reason matmul_internal.h gives for its `static inline`); the checks below make a file with
// other flags fail to compile instead.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || defined(__AVX512F__)
#error "simd_avx2.h: include it only from the *_avx2.cpp files (compiled with -mavx2 -mfma -mf16c)"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/ggml_type.h"

namespace pagoda::cpu::detail {
namespace {

struct F32x8 {
  using V = __m256;
  using Mask = __m256i;  // lanes [0, n) all ones
  static constexpr int kWidth = 8;
  // Activation rows per float-weight matmul call: 2 rows x 4 outputs keep 8 accumulators and 4
  // weight vectors in the 16 ymm registers.
  static constexpr int kFloatRows = 2;

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }

  // Lanes [0, n) for n in 1..8; masked loads read zeros elsewhere, masked stores leave the rest.
  static Mask tail(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  static V keep(Mask m, V v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }  // zero outside m

  // Fixed-order horizontal sum / max: ((0+4) + (2+6)) + ((1+5) + (3+7)).
  static float hsum(V v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
  }
  static float hmax(V v) {
    const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
  }

  // e^x's range reduction (simd_ops.h): x is clamped to [kExpMin, kExpMax] so that n stays in
  // [-126, 127], where 2^n is a normal float built from its exponent bits: below, the result
  // stays at ~1.6e-38 instead of a denormal or 0 (invisible next to a softmax's max term of 1).
  static constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
  static V round_nearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V scale_pow2(V p, V n) {  // p * 2^n, n integral in [-126, 127]
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }

  // 8 weights of a float-weight row (F32, F16 or BF16) from element k on, and the last rem < 8
  // of them zero-padded (through a copy: AVX2 has no 16-bit masked load).
  template <GgmlType T>
  static V load_w(const uint8_t* row, int64_t k) {
    if constexpr (T == GgmlType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    } else {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
      if constexpr (T == GgmlType::F16) return _mm256_cvtph_ps(h);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16 -> f32 is a shift
    }
  }
  template <GgmlType T>
  static V load_w_tail(const uint8_t* row, int64_t k, int64_t rem) {
    constexpr size_t esz = T == GgmlType::F32 ? 4 : 2;
    alignas(32) uint8_t buf[32] = {};
    std::memcpy(buf, row + k * esz, static_cast<size_t>(rem) * esz);
    return load_w<T>(buf, 0);
  }
  static V load_tail(const float* x, int64_t rem) {
    alignas(32) float b[8] = {};
    std::memcpy(b, x, static_cast<size_t>(rem) * 4);
    return _mm256_load_ps(b);
  }
};

}  // namespace
}  // namespace pagoda::cpu::detail
