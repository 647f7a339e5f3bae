// Block layouts of the quantized GGML weight types and scalar reference conversions.
// These are the oracle the SIMD kernels are tested against, and what make-model uses to
// write quantized weights.
#pragma once

#include <cstdint>

#include "kernels/ggml_type.h"

namespace pagoda::cpu {

// Converts n floats (n a multiple of the type's block size) to `type` at y.
// Supported: every type ggml_type_info marks `supported` (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
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

// Q4_1: 32 elements, value[i] = q[i] * d + m with q as Q4_0's nibbles (low nibbles 0..15).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: 32 elements, value[i] = (q[i] - 16) * d with a 5-bit q: the low 4 bits as Q4_0's nibbles,
// bit 4 of q[i] is bit i of the little-endian 32-bit word qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: Q5_0's 5-bit q with Q4_1's affine form, value[i] = q[i] * d + m.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q2_K: 256 elements in 16 sub-blocks of 16; scales[s] holds sub-block s's 4-bit scale (low
// nibble) and 4-bit min (high nibble): value = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4),
// q in 0..3. Element 128h + 32j + l (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32h + l], and
// element e uses sub-block e / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 256 elements in 16 sub-blocks of 16, value = d * (sc[s] - 32) * (q - 4), q in 0..7.
// Element e = 128h + 32j + l: the low 2 bits of q are bits 2j..2j+1 of qs[32h + l] (as Q2_K),
// bit 2 of q is bit 4h + j of hmask[l]. The 16 6-bit scales are packed in 12 bytes, see
// q3k_scale.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q5_K: Q4_K with a fifth bit: 8 sub-blocks of 32, scales/mins packed as Q4_K's (q4k_scale_min),
// value = d * sc[j] * q - dmin * m[j], q in 0..31. The low 4 bits of q are laid out as Q4_K's qs;
// bit 4 of element 32j + l (l < 32) is bit j of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// IQ4_NL: 32 elements, value[i] = d * kIq4nlValues[q[i]] with 4-bit indices laid out as Q4_0's.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_XS: 256 elements in 8 sub-blocks of 32, value = d * (ls[j] - 32) * kIq4nlValues[q], with
// 6-bit ls[j] = ((scales_l[j / 2] >> 4 * (j % 2)) & 15) | (((scales_h >> 2j) & 3) << 4).
// Sub-block j's indices are in qs[16j .. 16j + 15], laid out as an IQ4_NL block's.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The 16 non-linear levels of IQ4_NL and IQ4_XS (GGML's fixed table).
static constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Sub-block s (0..15) of a Q3_K block: 6-bit scale (0..63; the value uses scale - 32). The low 4
// bits are the low (s < 8) or high (s >= 8) nibble of scales[s % 8]; the top 2 bits are bits
// 2 * (s / 4) .. +1 of scales[8 + s % 4].
static inline int q3k_scale(int s, const uint8_t* sc) {
  const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
  const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  return lo | (hi << 4);
}

// Sub-block j (0..7) of an IQ4_XS block: 6-bit scale (0..63; the value uses ls - 32).
static inline int iq4xs_scale(int j, const BlockIQ4_XS& b) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

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
