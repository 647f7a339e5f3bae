// Philox4x32-10 counter-based random numbers (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11), usable on the host and in CUDA kernels so tests can recompute the draws
// the GPU sampler makes. A draw is a pure function of (seed, counter): no state to carry.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PAGODA_HD __host__ __device__ __forceinline__
#else
#define PAGODA_HD inline
#endif

namespace pagoda::cuda {

struct Philox4 {
  uint32_t v[4];
};

// Philox4x32 with 10 rounds on the 128-bit counter (c0..c3) under the 64-bit key (k0, k1).
PAGODA_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The block for counter (lo, hi of `counter`, 0, 0) under key (lo, hi of `seed`).
PAGODA_HD Philox4 philox4x32_10(uint64_t seed, uint64_t counter) {
  return philox4x32_10(static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u,
                       0u, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A uniform float in [0, 1) with 24 random bits, from the first word of the block.
PAGODA_HD float philox_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(philox4x32_10(seed, counter).v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace pagoda::cuda
