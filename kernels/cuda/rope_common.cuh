// RoPE helpers shared by rope.cu (rotating fresh Q/K rows) and k_shift.cu (re-roping cached K),
// so that both rotate the same dims by the same angles.
#pragma once

#include "kernels/cuda/common.cuh"

namespace pagoda::cuda {

// Pair i (0 <= i < n_rot/2) of a head: the two dims it rotates.
// llama: (2i, 2i+1); NeoX/qwen2: (i, i + n_rot/2).
__device__ __forceinline__ void rope_pair(int i, int n_rot, bool neox, int* a, int* b) {
  if (neox) {
    *a = i;
    *b = i + n_rot / 2;
  } else {
    *a = 2 * i;
    *b = 2 * i + 1;
  }
}

// cos and sin of pair i's angle for a (possibly negative) position offset p:
// p * freq_scale * freq_base^(-2i / n_rot) / freq_factors[i] (no divisor when freq_factors is
// null; GGUF rope_freqs.weight, indexed by the pair in both conventions). Computed in double,
// then rounded to float, as the CPU backend does, so both backends rotate by the same floats.
__device__ __forceinline__ void rope_cos_sin(double p, int i, int n_rot, float freq_base,
                                             float freq_scale, const float* freq_factors,
                                             float* c, float* s) {
  double inv_freq = pow((double)freq_base, -2.0 * i / n_rot);
  if (freq_factors != nullptr) inv_freq /= (double)freq_factors[i];
  const double angle = p * (double)freq_scale * inv_freq;
  double sd, cd;
  sincos(angle, &sd, &cd);
  *c = (float)cd;
  *s = (float)sd;
}

// (x0, x1) <- (x0 c - x1 s, x0 s + x1 c), with explicit roundings (no FMA contraction).
__device__ __forceinline__ void rotate(float c, float s, float* x0, float* x1) {
  const float a = *x0, b = *x1;
  *x0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  *x1 = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

}  // namespace pagoda::cuda
