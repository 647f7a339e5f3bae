// Q8_0 head rows of the KV cache (layout: kernels/kv_layout.h): the scalar quantize and
// dequantize every CPU path uses, and the reference the CUDA kernels are tested against.
#pragma once

#include <cstdint>

namespace pagoda::cpu {

// Quantizes n values (a whole number of groups of `group`) into n / group groups at dst.
void kv_q8_quantize(const float* x, int64_t n, int group, uint8_t* dst);
// The inverse: n values (a whole number of groups) from src.
void kv_q8_dequantize(const uint8_t* src, int64_t n, int group, float* y);

}  // namespace pagoda::cpu
