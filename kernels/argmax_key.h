// ArgmaxKey: a (logit, token) pair packed into one 64-bit word whose unsigned order is the
// greedy sampler's preference: a larger logit first, then the lower token id. The LM head's
// fused argmax (kernels/cuda/gemv.cu, gemv_dp4a.cu: one key per warp, argmax_pick.cu: the max
// of those keys) reduces keys with plain unsigned max, which is order-independent, so the
// result does not depend on how the vocabulary was split between warps.
// Plain C++ (no CUDA headers), like draw_params.h; the CPU reference fold is here too.
//
// Rule (the host sampler's argmax, engine/sampling/sampling.cpp, and sample.cu's greedy draw):
// the token is the lowest id whose logit equals the row's largest; -0 and +0 are equal (so -0
// is keyed as +0); a NaN never wins (it gets no key); a row whose logits are all -inf (or NaN)
// gives token 0. Key 0 means "no value".
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PAGODA_KEY_HD __host__ __device__ __forceinline__
#else
#define PAGODA_KEY_HD inline
#endif

namespace pagoda {

// The key of `token`'s logit v, or 0 for a NaN. High word: v's bits mapped so that unsigned
// order is float order (negative: all bits flipped; otherwise the sign bit set); low word:
// ~token, so the lower id is the larger key.
PAGODA_KEY_HD uint64_t argmax_key(float v, int32_t token) {
  if (v != v) return 0;
  if (v == 0.0f) v = 0.0f;  // -0 -> +0: equal logits tie on the id alone
  uint32_t b;
#if defined(__CUDA_ARCH__)
  b = __float_as_uint(v);
#else
  std::memcpy(&b, &v, 4);
#endif
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(token));
}

// The token a (max) key picks: 0 for key 0 (no value) or a -inf logit.
PAGODA_KEY_HD int32_t argmax_key_token(uint64_t key) {
  const uint32_t minus_inf = ~0xff800000u;  // the high word of -inf's key
  if (static_cast<uint32_t>(key >> 32) <= minus_inf) return 0;
  return static_cast<int32_t>(~static_cast<uint32_t>(key));
}

// CPU reference of the fused path: the token of a row of n logits, by folding keys.
inline int32_t argmax_by_keys(const float* x, int n) {
  uint64_t best = 0;
  for (int j = 0; j < n; ++j) {
    const uint64_t k = argmax_key(x[j], j);
    if (k > best) best = k;
  }
  return argmax_key_token(best);
}

}  // namespace pagoda
