// Block layouts of the quantized GGML weight types and scalar reference conversions.
// These are the oracle the SIMD kernels are tested against, and what make-model uses to
// write quantized weights.
#pragma once

#include <cstdint>

#include "kernels/ggml_type.h"

namespace pagoda::cpu {

// Converts n floats (n a multiple of the type's block size) to `type` at y.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
void quantize_row(GgmlType type, const float* x, void* y, int64_t n);
// The inverse: n elements of `type` at x to floats.
void dequantize_row(GgmlType type, const void* x, float* y, int64_t n);

// IEEE half / bfloat16 conversions (round to nearest even).
uint16_t fp32_to_fp16(float f);
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);
float bf16_to_fp32(uint16_t h);

}  // namespace pagoda::cpu
