// Quantization formats: half/bfloat16 conversions, dequantization of hand-made blocks against
// values computed by hand from the GGML layout, and quantize -> dequantize error bounds.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quants.h"

using namespace pagoda;
using namespace pagoda::cpu;

TEST_CASE("fp16 conversions round to nearest even and keep specials") {
  CHECK(fp32_to_fp16(1.0f) == 0x3C00);
  CHECK(fp32_to_fp16(-2.0f) == 0xC000);
  CHECK(fp32_to_fp16(65504.f) == 0x7BFF);
  CHECK(fp32_to_fp16(65520.f) == 0x7C00);           // halfway to 65536 rounds (even) to inf
  CHECK(fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3C00);  // tie -> even
  CHECK(fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3C02);  // tie -> even (up)
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie -> even (zero)
  CHECK(fp32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(fp32_to_fp16(INFINITY) == 0x7C00);
  CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  CHECK(fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(fp16_to_fp32(0x3555) == 0x1.554p-2f);
  // Every finite half survives a round trip through float exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    REQUIRE(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("bf16 conversions") {
  CHECK(fp32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_fp32(0x3F80) == 1.0f);
  CHECK(fp32_to_bf16(1.0f + 1.0f / 256) == 0x3F80);  // tie -> even
  CHECK(fp32_to_bf16(1.0f + 3.0f / 256) == 0x3F82);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
}

TEST_CASE("Q8_0 hand-made block") {
  BlockQ8_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i - 16);
  float y[32];
  dequantize_row(GgmlType::Q8_0, &b, y, 32);
  for (int i = 0; i < 32; ++i) CHECK(y[i] == 0.5f * (i - 16));
}

TEST_CASE("Q4_0 hand-made block: low nibbles are elements 0..15") {
  BlockQ4_0 b{};
  b.d = fp32_to_fp16(2.0f);
  for (int i = 0; i < 16; ++i) b.qs[i] = static_cast<uint8_t>((i & 15) | ((15 - i) << 4));
  float y[32];
  dequantize_row(GgmlType::Q4_0, &b, y, 32);
  for (int i = 0; i < 16; ++i) {
    CHECK(y[i] == 2.0f * (i - 8));
    CHECK(y[i + 16] == 2.0f * (15 - i - 8));
  }
}

TEST_CASE("Q4_K hand-made block: packed 6-bit scales and mins") {
  BlockQ4_K b{};
  b.d = fp32_to_fp16(0.25f);
  b.dmin = fp32_to_fp16(0.125f);
  const int sc[8] = {1, 2, 63, 17, 33, 48, 5, 60};
  const int mn[8] = {0, 7, 9, 63, 40, 1, 22, 31};
  // Pack by hand: bytes 0..3 scales 0..3 (+ top 2 bits of scales 4..7), 4..7 mins 0..3 (+ top
  // bits of mins 4..7), 8..11 low 4 bits of scale (low nibble) and min (high nibble) 4..7.
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    int s, m;
    q4k_scale_min(j, b.scales, s, m);
    CHECK(s == sc[j]);
    CHECK(m == mn[j]);
  }
  for (int l = 0; l < 128; ++l) b.qs[l] = static_cast<uint8_t>((l % 16) | (((l * 7) % 16) << 4));
  std::vector<float> y(256);
  dequantize_row(GgmlType::Q4_K, &b, y.data(), 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int byte = 32 * c + l;
      const int lo = byte % 16, hi = (byte * 7) % 16;
      CHECK(y[64 * c + l] == 0.25f * sc[2 * c] * lo - 0.125f * mn[2 * c]);
      CHECK(y[64 * c + 32 + l] == 0.25f * sc[2 * c + 1] * hi - 0.125f * mn[2 * c + 1]);
    }
}

TEST_CASE("Q6_K hand-made block: 4+2 bit split and 16 scales") {
  // Build the intended 6-bit values first, then pack them by the layout rules.
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 37 + 11) % 64;
  BlockQ6_K b{};
  b.d = fp32_to_fp16(0.5f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -(s + 1) : s + 3);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int* qq = q + 128 * h;
      b.ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
      b.ql[64 * h + l + 32] = static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
      b.qh[32 * h + l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) |
                                              ((qq[l + 96] >> 4) << 6));
    }
  std::vector<float> y(256);
  dequantize_row(GgmlType::Q6_K, &b, y.data(), 256);
  for (int e = 0; e < 256; ++e) CHECK(y[e] == 0.5f * b.scales[e / 16] * (q[e] - 32));
}

namespace {
// Random block bytes (every bit pattern of the packed fields gets exercised) with the fp16
// fields set to sane values; `expect(e)` computes element e straight from the layout text.
template <typename Block, typename Fix, typename Expect>
void check_random_blocks(GgmlType t, Fix fix, Expect expect) {
  std::mt19937 rng(static_cast<uint32_t>(t) * 7919u);
  const int n = ggml_type_info(t).block_size;
  for (int round = 0; round < 20; ++round) {
    Block b;
    auto* bytes = reinterpret_cast<uint8_t*>(&b);
    for (size_t i = 0; i < sizeof(Block); ++i) bytes[i] = static_cast<uint8_t>(rng());
    fix(b, rng);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, &b, y.data(), n);
    for (int e = 0; e < n; ++e) {
      const float want = expect(b, e);
      if (y[e] != want) FAIL(ggml_type_info(t).name << " element " << e << ": got " << y[e] << " want " << want);
    }
  }
}
uint16_t half_in(std::mt19937& rng, float lo, float hi) {
  return fp32_to_fp16(std::uniform_real_distribution<float>(lo, hi)(rng));
}
float h(uint16_t v) { return fp16_to_fp32(v); }
int nib(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }  // 32-element layout
int bit(const uint8_t* p, int i) { return (p[i / 8] >> (i % 8)) & 1; }
}  // namespace

TEST_CASE("Q4_1, Q5_0, Q5_1, IQ4_NL random blocks follow the GGML layout") {
  check_random_blocks<BlockQ4_1>(
      GgmlType::Q4_1, [](BlockQ4_1& b, std::mt19937& r) { b.d = half_in(r, 0.01f, 1.f), b.m = half_in(r, -2.f, 2.f); },
      [](const BlockQ4_1& b, int e) { return nib(b.qs, e) * h(b.d) + h(b.m); });
  check_random_blocks<BlockQ5_0>(
      GgmlType::Q5_0, [](BlockQ5_0& b, std::mt19937& r) { b.d = half_in(r, -1.f, 1.f); },
      [](const BlockQ5_0& b, int e) { return ((nib(b.qs, e) | (bit(b.qh, e) << 4)) - 16) * h(b.d); });
  check_random_blocks<BlockQ5_1>(
      GgmlType::Q5_1, [](BlockQ5_1& b, std::mt19937& r) { b.d = half_in(r, 0.01f, 1.f), b.m = half_in(r, -2.f, 2.f); },
      [](const BlockQ5_1& b, int e) { return (nib(b.qs, e) | (bit(b.qh, e) << 4)) * h(b.d) + h(b.m); });
  check_random_blocks<BlockIQ4_NL>(
      GgmlType::IQ4_NL, [](BlockIQ4_NL& b, std::mt19937& r) { b.d = half_in(r, -0.1f, 0.1f); },
      [](const BlockIQ4_NL& b, int e) { return h(b.d) * kIq4nlValues[nib(b.qs, e)]; });
  CHECK(kIq4nlValues[0] == -127);
  CHECK(kIq4nlValues[8] == 1);
  CHECK(kIq4nlValues[15] == 113);
}

TEST_CASE("Q2_K, Q3_K, Q5_K, IQ4_XS random blocks follow the GGML layout") {
  // Q2_K / Q3_K: element e = 128h + 32j + l takes bits 2j..2j+1 of qs[32h + l].
  auto two_bits = [](const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; };
  check_random_blocks<BlockQ2_K>(
      GgmlType::Q2_K, [](BlockQ2_K& b, std::mt19937& r) { b.d = half_in(r, 0.f, 1.f), b.dmin = half_in(r, 0.f, 1.f); },
      [&](const BlockQ2_K& b, int e) {
        const int sc = b.scales[e / 16] & 15, mn = b.scales[e / 16] >> 4;
        return h(b.d) * sc * two_bits(b.qs, e) - h(b.dmin) * mn;
      });
  check_random_blocks<BlockQ3_K>(
      GgmlType::Q3_K, [](BlockQ3_K& b, std::mt19937& r) { b.d = half_in(r, -0.1f, 0.1f); },
      [&](const BlockQ3_K& b, int e) {
        // 6-bit scale s: low 4 bits from byte s % 8 (low nibble for s < 8), top 2 bits from
        // byte 8 + s % 4 at bit 2 * (s / 4); the high bit of q is bit e / 32 of hmask[e % 32].
        const int s = e / 16;
        const int lo = (b.scales[s % 8] >> (s < 8 ? 0 : 4)) & 15, hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        const int q = two_bits(b.qs, e) + 4 * ((b.hmask[e % 32] >> (e / 32)) & 1);
        return h(b.d) * ((lo + 16 * hi) - 32) * (q - 4);
      });
  check_random_blocks<BlockQ5_K>(
      GgmlType::Q5_K, [](BlockQ5_K& b, std::mt19937& r) { b.d = half_in(r, 0.f, 0.1f), b.dmin = half_in(r, 0.f, 0.1f); },
      [](const BlockQ5_K& b, int e) {
        const int j = e / 32, l = e % 32;
        int sc, mn;
        q4k_scale_min(j, b.scales, sc, mn);
        const int q = ((b.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15) + 16 * ((b.qh[l] >> j) & 1);
        return h(b.d) * sc * q - h(b.dmin) * mn;
      });
  check_random_blocks<BlockIQ4_XS>(
      GgmlType::IQ4_XS, [](BlockIQ4_XS& b, std::mt19937& r) { b.d = half_in(r, -0.01f, 0.01f); },
      [](const BlockIQ4_XS& b, int e) {
        const int j = e / 32;
        const int ls = ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) + 16 * ((b.scales_h >> (2 * j)) & 3);
        return h(b.d) * (ls - 32) * kIq4nlValues[nib(b.qs + 16 * j, e % 32)];
      });
}

namespace {
// Max abs error of a quantize -> dequantize round trip, relative to the row's max magnitude.
double round_trip_error(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> buf(ggml_row_size(t, static_cast<int64_t>(x.size())));
  std::vector<float> y(x.size());
  quantize_row(t, x.data(), buf.data(), static_cast<int64_t>(x.size()));
  dequantize_row(t, buf.data(), y.data(), static_cast<int64_t>(x.size()));
  double err = 0, amax = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::fabs(double(x[i]) - y[i]));
    amax = std::max(amax, std::fabs(double(x[i])));
  }
  return err / amax;
}
}  // namespace

TEST_CASE("quantize -> dequantize error bounds") {
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(4096);
  for (auto& v : x) v = nd(rng);
  // Bounds: half a quantization step of each format relative to the largest magnitude in the
  // row, plus slack for the f16 rounding of scales. Q8_0: step amax/127 per block -> 0.5/127.
  // Q4_0: step amax/8; the largest magnitude maps to -8, so values of the other sign up to +amax
  // clamp at +7 steps -> up to one full step, 1/8. Q4_K: sub-block range/15 with 6-bit scales rounded up -> about
  // (2*amax/15)/2 * (1 + 1/63) plus min rounding (dmin/2). Q6_K: step amax/31 with 8-bit scales.
  CHECK(round_trip_error(GgmlType::F32, x) == 0.0);
  CHECK(round_trip_error(GgmlType::F16, x) < 1.0 / 2048);
  CHECK(round_trip_error(GgmlType::BF16, x) < 1.0 / 256);
  CHECK(round_trip_error(GgmlType::Q8_0, x) < 0.5 / 127 * 1.01);
  CHECK(round_trip_error(GgmlType::Q4_0, x) < 1.0 / 8 * 1.01);
  CHECK(round_trip_error(GgmlType::Q4_K, x) < 0.10);
  CHECK(round_trip_error(GgmlType::Q6_K, x) < 0.5 / 31 * 1.1);
  // The newer types, same reasoning: affine 32-blocks (Q4_1, Q5_1) half a step of range/15 or
  // range/31 (range <= 2 amax) plus the fp16 min; Q5_0 one step of amax/16 (as Q4_0); Q5_K as
  // Q4_K with 31 steps; Q3_K one step of amax/4 at 6-bit scales; Q2_K half a step of range/3 with
  // 4-bit scales rounded up and 4-bit mins (half a min step, up to amax/15); IQ4: the widest gap
  // between the non-linear levels (24 of 254) over the step's 127, plus 6-bit scale rounding.
  CHECK(round_trip_error(GgmlType::Q4_1, x) < 1.0 / 15 * 1.05);
  CHECK(round_trip_error(GgmlType::Q5_1, x) < 1.0 / 31 * 1.05);
  CHECK(round_trip_error(GgmlType::Q5_0, x) < 1.0 / 16 * 1.01);
  CHECK(round_trip_error(GgmlType::Q5_K, x) < 0.05);
  CHECK(round_trip_error(GgmlType::Q3_K, x) < 0.30);
  CHECK(round_trip_error(GgmlType::Q2_K, x) < 0.45);
  CHECK(round_trip_error(GgmlType::IQ4_NL, x) < 0.12);
  CHECK(round_trip_error(GgmlType::IQ4_XS, x) < 0.14);
  // An all-zero row stays zero (no division by zero in scale computation).
  std::vector<float> z(256, 0.f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    CHECK(round_trip_error(t, [&] { auto v = z; v[3] = 1.f; return v; }()) < 0.1);
}

TEST_CASE("unsupported type or partial block is refused") {
  float x[32] = {};
  uint8_t y[64];
  CHECK_THROWS_AS(quantize_row(GgmlType::Q8_0, x, y, 31), std::invalid_argument);
  CHECK_THROWS_AS(dequantize_row(GgmlType::Q8_1, y, x, 32), std::invalid_argument);
}
