// Scalar reference conversions of the 256-element super-block types added after Q4_K/Q6_K:
// Q2_K, Q3_K and IQ4_XS (layouts in quants.h; Q5_K lives next to Q4_K in quants.cpp). Scales
// are chosen simply (range or largest magnitude per sub-block, no error search), then the
// elements are re-quantized with the scales actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/quants_impl.h"

namespace pagoda::cpu::detail {

namespace {

int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// 2-bit values (or the low 2 bits of 3-bit ones) of 256 elements into Q2_K / Q3_K's qs.
void pack_2bit(const uint8_t* q, uint8_t* qs) {
  std::memset(qs, 0, 64);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 32; ++l) qs[32 * h + l] |= static_cast<uint8_t>((q[128 * h + 32 * j + l] & 3) << (2 * j));
}

int low_2bit(const uint8_t* qs, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return (qs[32 * h + l] >> (2 * j)) & 3;
}

// Signed sub-block scales s[j] against one fp16 step d: the largest |s| maps to -32, the rest to
// -32..31. Returns the stored step.
float quantize_signed_scales(const float* s, int n, uint16_t& dh, int* l) {
  float smax = 0.f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  dh = fp32_to_fp16(smax / -32.f);
  const float d = fp16_to_fp32(dh);
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int j = 0; j < n; ++j) l[j] = std::clamp(nearest_int(s[j] * id), -32, 31);
  return d;
}

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    int sc[16], m[16];
    uint8_t q[256];
    quantize_affine_subblocks(x, 16, 16, 3, 15, y[b].d, y[b].dmin, sc, m, q);
    for (int s = 0; s < 16; ++s) y[b].scales[s] = static_cast<uint8_t>(sc[s] | (m[s] << 4));
    pack_2bit(q, y[b].qs);
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int e = 0; e < 256; ++e) {
      const uint8_t sc = x[b].scales[e / 16];
      y[e] = d * (sc & 15) * low_2bit(x[b].qs, e) - dmin * (sc >> 4);
    }
  }
}

// Per 16-element sub-block the largest magnitude maps to level -4 (values -4..3, as Q4_0 does
// with -8), so the sub-block scale carries a sign.
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    float s[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0.f, vmax = 0.f;
      for (int i = 0; i < 16; ++i)
        if (std::fabs(x[16 * j + i]) > amax) amax = std::fabs(x[16 * j + i]), vmax = x[16 * j + i];
      s[j] = vmax / -4.f;
    }
    int l[16];
    const float d = quantize_signed_scales(s, 16, y[b].d, l);
    std::memset(y[b].scales, 0, sizeof(y[b].scales));
    for (int j = 0; j < 16; ++j) {
      const int v = l[j] + 32;
      y[b].scales[j % 8] |= static_cast<uint8_t>((v & 15) << (j < 8 ? 0 : 4));
      y[b].scales[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
    }
    uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      const float step = d * static_cast<float>(l[j]);
      const float is = step != 0.f ? 1.f / step : 0.f;
      for (int i = 0; i < 16; ++i) q[16 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int(x[16 * j + i] * is), -4, 3) + 4);
    }
    pack_2bit(q, y[b].qs);
    std::memset(y[b].hmask, 0, sizeof(y[b].hmask));
    for (int e = 0; e < 256; ++e) y[b].hmask[e % 32] |= static_cast<uint8_t>((q[e] >> 2) << (e / 32));
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d);
    for (int e = 0; e < 256; ++e) {
      const int q = low_2bit(x[b].qs, e) | (((x[b].hmask[e % 32] >> (e / 32)) & 1) << 2);
      y[e] = d * (q3k_scale(e / 16, x[b].scales) - 32) * (q - 4);
    }
  }
}

void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    float s[8];
    uint8_t q[32];
    for (int j = 0; j < 8; ++j) s[j] = iq4nl_fit(x + 32 * j, 32, q);
    int l[8];
    const float d = quantize_signed_scales(s, 8, y[b].d, l);
    y[b].scales_h = 0;
    std::memset(y[b].scales_l, 0, sizeof(y[b].scales_l));
    for (int j = 0; j < 8; ++j) {
      const int v = l[j] + 32;
      y[b].scales_l[j / 2] |= static_cast<uint8_t>((v & 15) << (4 * (j % 2)));
      y[b].scales_h = static_cast<uint16_t>(y[b].scales_h | ((v >> 4) << (2 * j)));
      const float step = d * static_cast<float>(l[j]);
      const float is = step != 0.f ? 1.f / step : 0.f;
      for (int i = 0; i < 32; ++i) q[i] = static_cast<uint8_t>(iq4nl_nearest(x[32 * j + i] * is));
      for (int i = 0; i < 16; ++i) y[b].qs[16 * j + i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * static_cast<float>(iq4xs_scale(j, x[b]) - 32);
      const uint8_t* qs = x[b].qs + 16 * j;
      for (int i = 0; i < 16; ++i) {
        y[32 * j + i] = dl * kIq4nlValues[qs[i] & 15];
        y[32 * j + i + 16] = dl * kIq4nlValues[qs[i] >> 4];
      }
    }
  }
}

}  // namespace pagoda::cpu::detail
