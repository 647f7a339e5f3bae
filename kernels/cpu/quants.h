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

// ---- Block layouts (byte-exact GGML/GGUF layouts; added for the matmul kernels) ----------
// All fp16 fields are IEEE half bit patterns. Structs are packed by construction (only
// uint8/uint16 members, sizes asserted), so they can be overlaid on mmap'd tensor data.

// Q8_0: 32 elements, value[i] = qs[i] * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: 32 elements, value[i] = ((qs[i] & 15) - 8) * d and value[i + 16] = ((qs[i] >> 4) - 8) * d
// for i < 16 (low nibbles hold elements 0..15, high nibbles 16..31).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_K: 256 elements in 8 sub-blocks of 32. Sub-block j has a 6-bit scale sc[j] and 6-bit min
// m[j] packed in `scales` (see q4k_scale_min); value = d * sc[j] * q - dmin * m[j], q in 0..15.
// qs holds 4 chunks of 64 elements: byte l of chunk c (32 bytes) has element 64c + l in its low
// nibble and element 64c + 32 + l in its high nibble.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q6_K: 256 elements in 16 sub-blocks of 16, value = d * scales[s] * (q - 32), q in 0..63.
// Two halves of 128 elements; in half h (ql += 64h, qh += 32h), for l < 32:
//   q[l]      = (ql[l] & 15)      | ((qh[l] >> 0) & 3) << 4
//   q[l + 32] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
//   q[l + 64] = (ql[l] >> 4)      | ((qh[l] >> 4) & 3) << 4
//   q[l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
// and element e (0..255) uses scales[e / 16].
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Unpacks the 6-bit scale and min of Q4_K sub-block j (0..7) from the 12 packed bytes.
// `static` on purpose: the per-ISA kernel files (compiled with AVX flags) use it too, and an
// external inline function could have one of their copies picked for portable callers.
static inline void q4k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace pagoda::cpu
