// Scalar reference conversions of the 32-element block types added after Q8_0/Q4_0: Q4_1, Q5_0,
// Q5_1 and IQ4_NL (layouts in quants.h). Round to nearest per block, like quants.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quants_impl.h"

namespace pagoda::cpu::detail {

namespace {

int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// 32 values -> the 4-bit halves of qs (low nibbles elements 0..15) and, for 5-bit types, bit 4 of
// each value into the 32-bit little-endian mask qh.
void pack_block32(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((q[i] & 15) | ((q[i + 16] & 15) << 4));
  if (qh == nullptr) return;
  std::memset(qh, 0, 4);
  for (int i = 0; i < 32; ++i) qh[i / 8] |= static_cast<uint8_t>(((q[i] >> 4) & 1) << (i % 8));
}

// The inverse: 4- or 5-bit values of one block.
void unpack_block32(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  for (int i = 0; i < 16; ++i) q[i] = qs[i] & 15, q[i + 16] = qs[i] >> 4;
  if (qh == nullptr) return;
  for (int i = 0; i < 32; ++i) q[i] |= static_cast<uint8_t>(((qh[i / 8] >> (i % 8)) & 1) << 4);
}

// Affine blocks (Q4_1, Q5_1): range [lo, hi] over qmax steps; elements re-quantized with the
// stored (fp16-rounded) step and min.
void quantize_affine32(const float* x, int qmax, uint16_t& dh, uint16_t& mh, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
  dh = fp32_to_fp16((hi - lo) / static_cast<float>(qmax));
  mh = fp32_to_fp16(lo);
  const float d = fp16_to_fp32(dh), m = fp16_to_fp32(mh);
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>(std::clamp(nearest_int((x[i] - m) * id), 0, qmax));
}

// Symmetric blocks (Q5_0): the largest magnitude maps to -half (as Q4_0 does with -8).
void quantize_symmetric32(const float* x, int half, uint16_t& dh, uint8_t* q) {
  float amax = 0.f, vmax = 0.f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
  const float d = vmax / static_cast<float>(-half);
  dh = fp32_to_fp16(d);
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>(std::clamp(nearest_int(x[i] * id) + half, 0, 2 * half - 1));
}

}  // namespace

// Midpoints between neighbouring levels: v above midpoint i is nearer level i + 1 (a tie stays
// with the lower level). Counting the midpoints below v is cheap and branch-free.
int iq4nl_nearest(float v) {
  static constexpr float kMid[15] = {-115.5f, -93.5f, -74.f, -57.f, -42.f, -28.5f, -16.f, -4.5f,
                                     7.f,     19.f,   31.5f, 45.5f, 61.f,  79.f,   101.f};
  int idx = 0;
  for (float m : kMid) idx += v > m;
  return idx;
}

float iq4nl_fit(const float* x, int n, uint8_t* q) {
  float amax = 0.f, vmax = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
  if (amax == 0.f) {
    for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(iq4nl_nearest(0.f));
    return 0.f;
  }
  auto assign = [&](float d, uint8_t* idx) {
    float err = 0.f;
    const float id = 1.f / d;
    for (int i = 0; i < n; ++i) {
      idx[i] = static_cast<uint8_t>(iq4nl_nearest(x[i] * id));
      const float e = x[i] - d * kIq4nlValues[idx[i]];
      err += e * e;
    }
    return err;
  };
  float d = vmax / kIq4nlValues[0];
  const float err = assign(d, q);
  float sxv = 0.f, svv = 0.f;
  for (int i = 0; i < n; ++i) sxv += x[i] * kIq4nlValues[q[i]], svv += float(kIq4nlValues[q[i]]) * kIq4nlValues[q[i]];
  if (svv > 0.f && sxv != 0.f) {
    uint8_t q2[256];
    const float d2 = sxv / svv;
    if (assign(d2, q2) < err) d = d2, std::memcpy(q, q2, static_cast<size_t>(n));
  }
  return d;
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    quantize_affine32(x, 15, y[b].d, y[b].m, q);
    pack_block32(q, y[b].qs, nullptr);
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    unpack_block32(x[b].qs, nullptr, q);
    for (int i = 0; i < 32; ++i) y[i] = q[i] * d + m;
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    quantize_symmetric32(x, 16, y[b].d, q);
    pack_block32(q, y[b].qs, y[b].qh);
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    unpack_block32(x[b].qs, x[b].qh, q);
    for (int i = 0; i < 32; ++i) y[i] = (q[i] - 16) * d;
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    quantize_affine32(x, 31, y[b].d, y[b].m, q);
    pack_block32(q, y[b].qs, y[b].qh);
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    unpack_block32(x[b].qs, x[b].qh, q);
    for (int i = 0; i < 32; ++i) y[i] = q[i] * d + m;
  }
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    y[b].d = fp32_to_fp16(iq4nl_fit(x, 32, q));
    // Re-pick the levels for the step actually stored.
    const float d = fp16_to_fp32(y[b].d);
    if (d != 0.f)
      for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>(iq4nl_nearest(x[i] * (1.f / d)));
    pack_block32(q, y[b].qs, nullptr);
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  uint8_t q[32];
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    unpack_block32(x[b].qs, nullptr, q);
    for (int i = 0; i < 32; ++i) y[i] = d * kIq4nlValues[q[i]];
  }
}

}  // namespace pagoda::cpu::detail
