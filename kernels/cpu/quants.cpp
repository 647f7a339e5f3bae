// Scalar reference conversions between floats and the GGML weight types (see quants.h for the
// block layouts). Quantizers aim for simple, predictable rounding (nearest, ties to even); they
// do not search for error-minimising scales the way llama.cpp's do, which is fine for make-model
// (random weights) and for tests.
#include "kernels/cpu/quants.h"

#include "kernels/cpu/quants_impl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pagoda::cpu {

// ---- half / bfloat16 ------------------------------------------------------------------------

uint16_t fp32_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or nan (keep nan quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
  const int exp = static_cast<int>(absx >> 23) - 127;
  if (exp >= -14) {  // normal half
    uint32_t mant = absx & 0x7FFFFFu;
    uint32_t h = (static_cast<uint32_t>(exp + 15) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent: fine
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: value = m * 2^-24 with m = round(|f| * 2^24).
  const uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;  // 24-bit significand, value mant*2^(exp-23)
  const int shift = -exp - 1;                             // 14 .. 24 -> bits to drop: (exp-23)+24 = exp+1
  const uint32_t drop = static_cast<uint32_t>(shift);
  uint32_t h = mant >> drop;
  const uint32_t rem = mant & ((1u << drop) - 1u);
  const uint32_t half = 1u << (drop - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    x = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_fp32(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

int nearest_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// ---- Q8_0 / Q4_0 ----------------------------------------------------------------------------

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[b].d = fp32_to_fp16(d);
    for (int i = 0; i < 32; ++i) y[b].qs[i] = static_cast<int8_t>(std::clamp(nearest_int(x[i] * id), -127, 127));
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < 32; ++i) y[i] = x[b].qs[i] * d;
  }
}

// The element of largest magnitude maps to -8 (the asymmetric end of the 4-bit range), so
// positive values get the full 7 steps on the other side.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.f, vmax = 0.f;
    for (int i = 0; i < 32; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
    const float d = vmax / -8.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    y[b].d = fp32_to_fp16(d);
    for (int i = 0; i < 16; ++i) {
      const int lo = std::clamp(nearest_int(x[i] * id) + 8, 0, 15);
      const int hi = std::clamp(nearest_int(x[i + 16] * id) + 8, 0, 15);
      y[b].qs[i] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 32) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < 16; ++i) {
      y[i] = ((x[b].qs[i] & 15) - 8) * d;
      y[i + 16] = ((x[b].qs[i] >> 4) - 8) * d;
    }
  }
}

// ---- Q4_K / Q5_K --------------------------------------------------------------------------
// Per sub-block: affine range [min(0, lo), hi] over qmax steps; scales and mins are then quantized
// to `levels` (63: 6 bits, 15: 4 bits) against the super-block's largest, and the elements
// re-quantized with the scales actually stored so that rounding of the scales does not bias the
// values. Shared by Q4_K, Q5_K and Q2_K (quants_kquants.cpp).

}  // namespace

namespace detail {

void quantize_affine_subblocks(const float* x, int nsub, int len, int qmax, int levels, uint16_t& dh, uint16_t& mh,
                               int* sc, int* m, uint8_t* q) {
  float scale[16], minv[16];
  float max_scale = 0.f, max_min = 0.f;
  for (int j = 0; j < nsub; ++j) {
    float lo = 0.f, hi = -INFINITY;
    for (int i = 0; i < len; ++i) lo = std::min(lo, x[len * j + i]), hi = std::max(hi, x[len * j + i]);
    hi = std::max(hi, lo);
    scale[j] = (hi - lo) / static_cast<float>(qmax);
    minv[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  dh = fp32_to_fp16(max_scale / static_cast<float>(levels));
  mh = fp32_to_fp16(max_min / static_cast<float>(levels));
  const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
  for (int j = 0; j < nsub; ++j) {
    // Round the scale up so the sub-block's top value stays in range after quantization.
    sc[j] = d > 0.f ? std::clamp(static_cast<int>(std::ceil(scale[j] / d)), 0, levels) : 0;
    m[j] = dmin > 0.f ? std::clamp(nearest_int(minv[j] / dmin), 0, levels) : 0;
    const float s = d * static_cast<float>(sc[j]), off = dmin * static_cast<float>(m[j]);
    const float is = s != 0.f ? 1.f / s : 0.f;
    for (int i = 0; i < len; ++i)
      q[len * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[len * j + i] + off) * is), 0, qmax));
  }
}

}  // namespace detail

namespace {

// Q4_K / Q5_K's 12-byte packing of eight 6-bit scales and mins (see q4k_scale_min).
void pack_scale_min_k4(const int* sc, const int* m, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Low 4 bits of 256 values in Q4_K / Q5_K's qs layout.
void pack_nibbles_k4(const uint8_t* q, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<uint8_t>((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    int sc[8], m[8];
    uint8_t q[256];
    detail::quantize_affine_subblocks(x, 8, 32, 15, 63, y[b].d, y[b].dmin, sc, m, q);
    pack_scale_min_k4(sc, m, y[b].scales);
    pack_nibbles_k4(q, y[b].qs);
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    int sc[8], m[8];
    uint8_t q[256];
    detail::quantize_affine_subblocks(x, 8, 32, 31, 63, y[b].d, y[b].dmin, sc, m, q);
    pack_scale_min_k4(sc, m, y[b].scales);
    pack_nibbles_k4(q, y[b].qs);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) y[b].qh[l] |= static_cast<uint8_t>((q[32 * j + l] >> 4) << j);
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      q4k_scale_min(j, x[b].scales, sc, m);
      const float dj = d * sc, oj = dmin * m;
      const uint8_t* qs = x[b].qs + 32 * (j / 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> (4 * (j % 2))) & 15) | (((x[b].qh[l] >> j) & 1) << 4);
        y[32 * j + l] = dj * q - oj;
      }
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      q4k_scale_min(2 * c, x[b].scales, sc0, m0);
      q4k_scale_min(2 * c + 1, x[b].scales, sc1, m1);
      const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
      const uint8_t* qs = x[b].qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        y[64 * c + l] = d0 * (qs[l] & 15) - o0;
        y[64 * c + 32 + l] = d1 * (qs[l] >> 4) - o1;
      }
    }
  }
}

// ---- Q6_K ---------------------------------------------------------------------------------
// Per 16-element sub-block a symmetric scale (largest magnitude -> 31 steps), 8-bit scales
// against the super-block's largest, then re-quantization with the stored scales.

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    float scale[16], max_scale = 0.f;
    for (int s = 0; s < 16; ++s) {
      float amax = 0.f;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * s + i]));
      scale[s] = amax / 31.f;
      max_scale = std::max(max_scale, scale[s]);
    }
    BlockQ6_K& blk = y[b];
    blk.d = fp32_to_fp16(max_scale / 127.f);
    const float d = fp16_to_fp32(blk.d);
    uint8_t q[256];
    for (int s = 0; s < 16; ++s) {
      const int sc = d > 0.f ? std::clamp(nearest_int(scale[s] / d), 0, 127) : 0;
      blk.scales[s] = static_cast<int8_t>(sc);
      const float step = d * sc;
      const float is = step != 0.f ? 1.f / step : 0.f;
      for (int i = 0; i < 16; ++i)
        q[16 * s + i] = static_cast<uint8_t>(std::clamp(nearest_int(x[16 * s + i] * is), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = blk.ql + 64 * h;
      uint8_t* qh = blk.qh + 32 * h;
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                     ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, y += 256) {
    const float d = fp16_to_fp32(x[b].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[b].ql + 64 * h;
      const uint8_t* qh = x[b].qh + 32 * h;
      const int8_t* sc = x[b].scales + 8 * h;
      float* yy = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yy[l] = d * sc[is + 0] * q1;
        yy[l + 32] = d * sc[is + 2] * q2;
        yy[l + 64] = d * sc[is + 4] * q3;
        yy[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

int64_t checked_blocks(GgmlType type, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  if (info == nullptr || !info->supported)
    throw std::invalid_argument("quants: unsupported type id " + std::to_string(static_cast<uint32_t>(type)));
  if (n < 0 || n % info->block_size != 0)
    throw std::invalid_argument(std::string("quants: row of ") + std::to_string(n) + " elements is not a multiple of " +
                                info->name + "'s block size " + std::to_string(info->block_size));
  return n / info->block_size;
}

}  // namespace

void quantize_row(GgmlType type, const float* x, void* y, int64_t n) {
  const int64_t nb = checked_blocks(type, n);
  switch (type) {
    case GgmlType::F32: std::memcpy(y, x, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_fp16(x[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_bf16(x[i]);
      return;
    case GgmlType::Q8_0: quantize_q8_0(x, static_cast<BlockQ8_0*>(y), nb); return;
    case GgmlType::Q4_0: quantize_q4_0(x, static_cast<BlockQ4_0*>(y), nb); return;
    case GgmlType::Q4_K: quantize_q4_k(x, static_cast<BlockQ4_K*>(y), nb); return;
    case GgmlType::Q6_K: quantize_q6_k(x, static_cast<BlockQ6_K*>(y), nb); return;
    case GgmlType::Q5_K: quantize_q5_k(x, static_cast<BlockQ5_K*>(y), nb); return;
    case GgmlType::Q4_1: detail::quantize_q4_1(x, static_cast<BlockQ4_1*>(y), nb); return;
    case GgmlType::Q5_0: detail::quantize_q5_0(x, static_cast<BlockQ5_0*>(y), nb); return;
    case GgmlType::Q5_1: detail::quantize_q5_1(x, static_cast<BlockQ5_1*>(y), nb); return;
    case GgmlType::IQ4_NL: detail::quantize_iq4_nl(x, static_cast<BlockIQ4_NL*>(y), nb); return;
    case GgmlType::Q2_K: detail::quantize_q2_k(x, static_cast<BlockQ2_K*>(y), nb); return;
    case GgmlType::Q3_K: detail::quantize_q3_k(x, static_cast<BlockQ3_K*>(y), nb); return;
    case GgmlType::IQ4_XS: detail::quantize_iq4_xs(x, static_cast<BlockIQ4_XS*>(y), nb); return;
    default: break;
  }
  throw std::invalid_argument("quants: no quantizer for this type");
}

void dequantize_row(GgmlType type, const void* x, float* y, int64_t n) {
  const int64_t nb = checked_blocks(type, n);
  switch (type) {
    case GgmlType::F32: std::memcpy(y, x, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(static_cast<const uint16_t*>(x)[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(static_cast<const uint16_t*>(x)[i]);
      return;
    case GgmlType::Q8_0: dequantize_q8_0(static_cast<const BlockQ8_0*>(x), y, nb); return;
    case GgmlType::Q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(x), y, nb); return;
    case GgmlType::Q4_K: dequantize_q4_k(static_cast<const BlockQ4_K*>(x), y, nb); return;
    case GgmlType::Q6_K: dequantize_q6_k(static_cast<const BlockQ6_K*>(x), y, nb); return;
    case GgmlType::Q5_K: dequantize_q5_k(static_cast<const BlockQ5_K*>(x), y, nb); return;
    case GgmlType::Q4_1: detail::dequantize_q4_1(static_cast<const BlockQ4_1*>(x), y, nb); return;
    case GgmlType::Q5_0: detail::dequantize_q5_0(static_cast<const BlockQ5_0*>(x), y, nb); return;
    case GgmlType::Q5_1: detail::dequantize_q5_1(static_cast<const BlockQ5_1*>(x), y, nb); return;
    case GgmlType::IQ4_NL: detail::dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(x), y, nb); return;
    case GgmlType::Q2_K: detail::dequantize_q2_k(static_cast<const BlockQ2_K*>(x), y, nb); return;
    case GgmlType::Q3_K: detail::dequantize_q3_k(static_cast<const BlockQ3_K*>(x), y, nb); return;
    case GgmlType::IQ4_XS: detail::dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(x), y, nb); return;
    default: break;
  }
  throw std::invalid_argument("quants: no dequantizer for this type");
}

}  // namespace pagoda::cpu
