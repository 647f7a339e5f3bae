// Shared between matmul.cpp (dispatch, scalar kernels) and the per-ISA kernel files.
// Everything here is `static inline` on purpose: each translation unit gets its own copy
// compiled with its own ISA flags, so an AVX-512 build of a helper can never be linked into
// portable code (which a shared inline function would allow).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/cpu/quants.h"
#include "kernels/ggml_type.h"

// The quantized weight types the int8 kernels handle, for the per-ISA files' dispatch switches
// (their kernels are templates local to each file, compiled with that file's ISA flags):
//   #define CASE(T) case GgmlType::T: return kernel<GgmlType::T>(...);
//   PAGODA_INT8_WEIGHT_TYPES(CASE)
#define PAGODA_INT8_WEIGHT_TYPES(X) \
  X(Q8_0) X(Q4_0) X(Q4_K) X(Q6_K) X(Q4_1) X(Q5_0) X(Q5_1) X(Q2_K) X(Q3_K) X(Q5_K) X(IQ4_NL) X(IQ4_XS)

namespace pagoda::cpu {
class ThreadPool;
}

namespace pagoda::cpu::detail {

// Activations quantized per row to int8 blocks of 32: for row i and block b,
// x[i][32b + t] ~= q[i][32b + t] * d[i][b], with s[i][2b + h] = sum of the 16 q of half h.
struct QuantActs {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* s = nullptr;
  int64_t k = 0;  // elements per row
  // Decode-call terms (n <= kFewRowsMax), made once per call before the outputs are split over
  // threads (made per chunk of outputs, they cost up to ~10% of a 2-thread decode matmul):
  // [n][k / 32 * fsum_per_block] float(s[2b] + s[2b + 1]) (block_min types), or float(s[h]) per
  // half (half_mins types), see min_sums_per_block:
  const float* fsum = nullptr;
  int fsum_per_block = 0;
  // [n][k / 32 * corr_per_block] weight_offset * that sum (has_block_correction types) or * each
  // half's sum s (the half-scale types with an offset), see corrections_per_block:
  const int32_t* corr = nullptr;
  int corr_per_block = 0;
  const int8_t* row_q(int64_t i) const { return q + i * k; }
  const float* row_d(int64_t i) const { return d + i * (k / 32); }
  const int16_t* row_s(int64_t i) const { return s + i * (k / 16); }
  const float* row_fsum(int64_t i) const { return fsum ? fsum + i * (k / 32) * fsum_per_block : nullptr; }
  const int32_t* row_corr(int64_t i) const { return corr ? corr + i * (k / 32) * corr_per_block : nullptr; }
};

// Quantizes one row of k floats (k a multiple of 32): d = amax / 127, q = nearest(x * (1 / d)).
void quantize_activation_row(const float* x, int64_t k, int8_t* q, float* d, int16_t* s);
// The same, bit-identical, with AVX-512 (only when cpu_supports(CpuIsa::Avx512)) and AVX2.
void quantize_activation_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int16_t* s);
void quantize_activation_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int16_t* s);

// Fills the decode-call terms that `acts` has pointers for (fsum, corr) from its s; run once
// per call before the outputs are split over threads.
void prepare_decode_terms(GgmlType wtype, const QuantActs& acts, int64_t n);

// Everything a kernel needs for one call. Kernels compute outputs [o_begin, o_end) for all n rows.
struct MatmulArgs {
  GgmlType type;
  const uint8_t* w;   // row o starts at w + o * row_bytes
  size_t row_bytes;
  int64_t out_features;
  int64_t k;          // in_features
  const float* x;     // [n][k] (float weight types)
  QuantActs acts;     // quantized x (quantized weight types)
  int64_t n;
  float* out;         // [n][out_features]
  // x rounded to bf16, rows of xb_k elements (k rounded up to 32, zero-padded, 64-byte aligned):
  // set for BF16 weights when uses_bf16_dot(isa, type) (matmul_bf16_avx512.cpp).
  const uint16_t* xb = nullptr;
  int64_t xb_k = 0;
  // Quantized activations re-laid for the AVX-512 prefill micro-kernel (n > kFewRowsMax):
  // see quantize_activation_panels_avx512.
  const uint8_t* panel = nullptr;
  // w is in the decode layout (weight_pack.h) of the level that runs: Tiles8 at AVX2 (the decode
  // kernels read it directly, matmul_packed_avx2, the prefill tile through
  // unpack_packed_tile_avx2), Rows16 at AVX-512 (the decode kernels read it with
  // decode_panel, the prefill tile unpacks its groups with rows16_tile_half); the rows past the last full group are GGML rows.
  bool packed = false;
  // Rows16 decode calls (AVX-512, packed, n <= kFewRowsMax): the activations as
  // pack_rows16_decode_panel lays them out.
  const uint8_t* decode_panel = nullptr;
};

// The Rows16 decode panel: per 32-element block b and activation row i of n, kRows16PanelBytes at
// (b * n + i) * kRows16PanelBytes: the row's 32 int8 quants of the block, then as dwords the
// chain seed -offset * (their sum) as int32 (of elements 0-15 only for the half-scale types;
// weight t's offset), the block scale d as float, float(sum of the quants) for the min term, and
// the seed of elements 16-31 (half-scale types). One pointer per block reaches every row at a
// fixed offset.
constexpr int64_t kRows16PanelBytes = 64;
inline int64_t rows16_decode_panel_bytes(int64_t n, int64_t k) { return n * (k / 32) * kRows16PanelBytes; }
void pack_rows16_decode_panel(GgmlType t, const QuantActs& acts, int64_t n, uint8_t* panel);
// Outputs [o_begin, o_end) of weights in the Rows16 layout (a.packed, a.decode_panel), within
// its full groups of 16 rows; see matmul_rows16_avx512.cpp.
void matmul_rows16_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// Where the AVX-512 prefill tile holds 16 lanes' blocks: register c (elements 4c..4c+3 of the 16
// lanes as u bytes, 64 bytes) of block b at qs + b * qs_block + c * qs_reg, block b's scales of
// the 16 lanes (the values of block_scales: s0, s1 for the half-scale types, m for block_min)
// at s0 / s1 / m + b * s_block.
struct Rows16TileHalf {
  uint8_t* qs;
  size_t qs_block, qs_reg;
  float *s0, *s1, *m;
  size_t s_block;
};
// Blocks [b0, b0 + nblk) of the full Rows16 group of type t at `group` into dst.
void rows16_tile_half(GgmlType t, const uint8_t* group, int64_t b0, int nblk, const Rows16TileHalf& dst);

// Activation panels: rows in groups of kPanelRows; per group and 32-element block,
// kPanelBlockBytes holding the group's int8 dwords interleaved by row, the per-type integer
// offset correction, the scales and the block sums, so that the micro-kernel reads every row
// from one pointer with fixed offsets (rows past n are zero).
constexpr int64_t kPanelRows = 4;
constexpr int64_t kPanelBlockBytes = 256;
inline int64_t activation_panel_bytes(int64_t n, int64_t k) {
  return (n + kPanelRows - 1) / kPanelRows * (k / 32) * kPanelBlockBytes;
}
// Work space of quantize_activation_panels_avx512: one row group's quants and terms.
inline size_t panel_group_bytes(int64_t k) { return static_cast<size_t>(kPanelRows * (k + (k / 32) * 8)); }
// Quantizes the rows of row groups [g_begin, g_end) of x (n rows of k) as
// quantize_activation_row_avx512 does and packs them for weight type t; `work` holds
// panel_group_bytes(k) bytes that stay in L1/L2 while a group is packed (one per thread).
void quantize_activation_panels_avx512(GgmlType t, const float* x, int64_t k, int64_t n, int64_t g_begin,
                                       int64_t g_end, uint8_t* panel, uint8_t* work);

void matmul_range_scalar(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
void matmul_range_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
void matmul_range_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// AVX-512 quantized kernels for n <= kFewRowsMax activation rows (decode), without tiles.
constexpr int64_t kFewRowsMax = 16;
void matmul_few_rows_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// The same at the AVX2 level.
void matmul_few_rows_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// The same for weights in the decode layout (a.packed).
void matmul_packed_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// Tile `super` (8 rows x super-block `super`'s 256 elements) of the decode-layout group whose
// tiles start at `group`, as the AVX2 prefill tile holds its blocks: u + 256 * b + 32 * c =
// register c of block b (elements 4c..4c+3 of the 8 rows as u bytes; for the signed_weights
// types |q| there and q at sg + 256 * b + 32 * c), and at [8 * b + l] block b's scales of row l
// in the arrays its type uses (s0; s1 for half_scales; m for block_min and half_mins; m1 for
// half_mins), the values of block_scales. The rest are left as they are.
void unpack_packed_tile_avx2(GgmlType t, const uint8_t* group, int64_t super, uint8_t* u, int8_t* sg, float* s0, float* s1,
                             float* m, float* m1);

// BF16 weights with AVX512_BF16 (vdpbf16ps) on bf16-rounded activations; see
// matmul_bf16_avx512.cpp. Only when cpu_features().avx512_bf16 and the level is Avx512.
void matmul_bf16_dot_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// x [rows][k] -> y [rows][k_pad] in bf16 (round to nearest even, zero past k; k_pad % 32 == 0).
void convert_rows_bf16_avx512(const float* x, int64_t k, int64_t k_pad, int64_t rows, uint16_t* y);

// The AMX level's tile kernel for quantized weights with more than kFewRowsMax rows (prefill):
// outputs [o_begin, o_end) in tiles of 32, rows in tiles of kAmxRows (matmul_amx.cpp runs the
// body of matmul_amx_kernel.h on the real tiles). Only when cpu_supports(CpuIsa::Amx). It reads
// a.acts directly (no panels): its q array must hold amx_padded_rows(n) rows, those past n zero,
// since a tile load takes 16 rows.
constexpr int64_t kAmxRows = 16;
static constexpr int64_t amx_padded_rows(int64_t n) { return (n + kAmxRows - 1) / kAmxRows * kAmxRows; }
void matmul_range_amx(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
using RangeKernel = void (*)(const MatmulArgs& a, int64_t o_begin, int64_t o_end);
// matmul at the Amx level with `tiles` as its tile kernel, on any CPU that has the Avx512 level:
// matmul_range_amx on an AMX host, the same kernel body on the tile emulator in the tests.
void matmul_amx_level(ThreadPool& pool, RangeKernel tiles, GgmlType wtype, const void* w, bool packed,
                      int64_t out_features, int64_t in_features, const float* x, int64_t n, float* out);

// Half -> float: one instruction where the translation unit has F16C, else the portable routine.
static inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

static inline bool is_quantized(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return true;
    default: return false;
  }
}

// ---- The quantized-weight arithmetic every ISA reproduces exactly -------------------------
//
// Each 32-element weight block is decoded to unsigned bytes u[32] with an integer offset, a
// scale per 16-element half (s0, s1; equal unless the type has 16-element sub-blocks) and a min
// per half (m0, m1; zero unless the type is affine), value[e] = s_h * (u[e] - offset) - m_h:
//   Q8_0: u = q + 128 (offset 128), s = d           Q4_0: u = nibble (offset 8), s = d
//   Q5_0: u = 5 bits (offset 16), s = d             Q4_1, Q5_1: u = 4/5 bits, s = d, m = -min
//   Q4_K, Q5_K: u = 4/5 bits, s = d * sc[j], m = dmin * min[j]
//   Q6_K: u = 6 bits (offset 32), s_h = d * sc[2j + h]
//   Q3_K: u = 3 bits (offset 4), s_h = d * (sc[2j + h] - 32)
//   Q2_K: u = 2 bits, s_h = d * (sc & 15), m_h = dmin * (sc >> 4) of sub-block 2j + h
//   IQ4_NL, IQ4_XS: u = level + 128 (offset 128), s = d (times ls - 32 for IQ4_XS)
// and with activations (xq, dx, xs0, xs1) the pair accumulator `acc` is updated by
// accumulate_block below. SIMD kernels compute the same integers (in any order: they are exact)
// and must then perform the same float operations in the same order.

static inline constexpr int weight_offset(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: return 128;
    case GgmlType::Q4_0: return 8;
    case GgmlType::Q5_0: return 16;
    case GgmlType::Q6_K: return 32;
    case GgmlType::Q3_K: return 4;
    default: return 0;
  }
}

// Types whose u - offset is a signed 8-bit weight that u itself can exceed 127 for (AVX2 forms
// |w| * sign(x, w) products instead, see Dot4 in matmul_avx2.cpp).
static inline constexpr bool signed_weights(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS;
}
// 16-element sub-blocks: a scale per half block.
static inline constexpr bool half_scales(GgmlType t) {
  return t == GgmlType::Q6_K || t == GgmlType::Q3_K || t == GgmlType::Q2_K;
}
// One min for the whole block (m0 == m1) / one per half (Q2_K).
static inline constexpr bool block_min(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
}
static inline constexpr bool half_mins(GgmlType t) { return t == GgmlType::Q2_K; }
// Types whose AVX2 decode epilogue subtracts weight_offset * (block sum of x) as an integer.
static inline constexpr bool has_block_correction(GgmlType t) {
  return !half_scales(t) && !signed_weights(t) && weight_offset(t) != 0;
}
// The integer offset corrections per 32-element block that the AVX2 decode epilogue subtracts
// (QuantActs::corr): one for has_block_correction types, one per half for the half-scale types
// with an offset (Q3_K, Q6_K), none for the others.
static inline constexpr int corrections_per_block(GgmlType t) {
  if (has_block_correction(t)) return 1;
  return half_scales(t) && weight_offset(t) != 0 ? 2 : 0;
}
// The float sums of x per 32-element block that the decode kernels' min term multiplies
// (QuantActs::fsum): one for block_min types, one per half for half_mins (Q2_K), none otherwise.
static inline constexpr int min_sums_per_block(GgmlType t) { return block_min(t) ? 1 : half_mins(t) ? 2 : 0; }
// 32-element blocks per GGML block (the unit whose scales decode together).
static inline constexpr int blocks_per_group(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return 8;
    default: return 1;
  }
}

struct BlockScales {
  float s0 = 0.f, s1 = 0.f, m0 = 0.f, m1 = 0.f;
};

// Scales of 32-element block b of a weight row of one of the types added with the generic
// kernels (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS); see the table above.
static inline BlockScales block_scales(GgmlType t, const uint8_t* row, int64_t b) {
  BlockScales r;
  const int j = static_cast<int>(b % 8);
  switch (t) {
    case GgmlType::Q4_1: {
      const BlockQ4_1* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
      r.s0 = r.s1 = half_to_float(blk->d);
      r.m0 = r.m1 = -half_to_float(blk->m);
      break;
    }
    case GgmlType::Q5_1: {
      const BlockQ5_1* blk = reinterpret_cast<const BlockQ5_1*>(row) + b;
      r.s0 = r.s1 = half_to_float(blk->d);
      r.m0 = r.m1 = -half_to_float(blk->m);
      break;
    }
    case GgmlType::Q5_0: r.s0 = r.s1 = half_to_float((reinterpret_cast<const BlockQ5_0*>(row) + b)->d); break;
    case GgmlType::IQ4_NL: r.s0 = r.s1 = half_to_float((reinterpret_cast<const BlockIQ4_NL*>(row) + b)->d); break;
    case GgmlType::Q2_K: {
      const BlockQ2_K* blk = reinterpret_cast<const BlockQ2_K*>(row) + b / 8;
      const float d = half_to_float(blk->d), dmin = half_to_float(blk->dmin);
      const uint8_t a = blk->scales[2 * j], c = blk->scales[2 * j + 1];
      r.s0 = d * static_cast<float>(a & 15), r.s1 = d * static_cast<float>(c & 15);
      r.m0 = dmin * static_cast<float>(a >> 4), r.m1 = dmin * static_cast<float>(c >> 4);
      break;
    }
    case GgmlType::Q3_K: {
      const BlockQ3_K* blk = reinterpret_cast<const BlockQ3_K*>(row) + b / 8;
      const float d = half_to_float(blk->d);
      r.s0 = d * static_cast<float>(q3k_scale(2 * j, blk->scales) - 32);
      r.s1 = d * static_cast<float>(q3k_scale(2 * j + 1, blk->scales) - 32);
      break;
    }
    case GgmlType::Q5_K: {
      const BlockQ5_K* blk = reinterpret_cast<const BlockQ5_K*>(row) + b / 8;
      int sc, mn;
      q4k_scale_min(j, blk->scales, sc, mn);
      r.s0 = r.s1 = half_to_float(blk->d) * static_cast<float>(sc);
      r.m0 = r.m1 = half_to_float(blk->dmin) * static_cast<float>(mn);
      break;
    }
    case GgmlType::IQ4_XS: {
      const BlockIQ4_XS* blk = reinterpret_cast<const BlockIQ4_XS*>(row) + b / 8;
      r.s0 = r.s1 = half_to_float(blk->d) * static_cast<float>(iq4xs_scale(j, *blk) - 32);
      break;
    }
    default: break;
  }
  return r;
}

// u bytes of block b for the types block_scales covers (portable; the x86 kernels have SIMD
// versions in matmul_unpack_x86.h).
static inline void block_values(GgmlType t, const uint8_t* row, int64_t b, uint8_t* u) {
  auto nibbles = [&](const uint8_t* qs) {
    for (int i = 0; i < 16; ++i) u[i] = qs[i] & 15, u[i + 16] = qs[i] >> 4;
  };
  auto fifth_bit = [&](const uint8_t* qh) {
    for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(u[i] | (((qh[i / 8] >> (i % 8)) & 1) << 4));
  };
  auto levels = [&]() {
    for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(kIq4nlValues[u[i]] + 128);
  };
  const int j = static_cast<int>(b % 8);
  switch (t) {
    case GgmlType::Q4_1: nibbles((reinterpret_cast<const BlockQ4_1*>(row) + b)->qs); return;
    case GgmlType::Q5_0: {
      const BlockQ5_0* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
      nibbles(blk->qs);
      fifth_bit(blk->qh);
      return;
    }
    case GgmlType::Q5_1: {
      const BlockQ5_1* blk = reinterpret_cast<const BlockQ5_1*>(row) + b;
      nibbles(blk->qs);
      fifth_bit(blk->qh);
      return;
    }
    case GgmlType::IQ4_NL: nibbles((reinterpret_cast<const BlockIQ4_NL*>(row) + b)->qs); levels(); return;
    case GgmlType::IQ4_XS: nibbles((reinterpret_cast<const BlockIQ4_XS*>(row) + b / 8)->qs + 16 * j); levels(); return;
    case GgmlType::Q2_K: {
      const uint8_t* qs = (reinterpret_cast<const BlockQ2_K*>(row) + b / 8)->qs + 32 * (j / 4);
      for (int i = 0; i < 32; ++i) u[i] = (qs[i] >> (2 * (j % 4))) & 3;
      return;
    }
    case GgmlType::Q3_K: {
      const BlockQ3_K* blk = reinterpret_cast<const BlockQ3_K*>(row) + b / 8;
      const uint8_t* qs = blk->qs + 32 * (j / 4);
      for (int i = 0; i < 32; ++i)
        u[i] = static_cast<uint8_t>(((qs[i] >> (2 * (j % 4))) & 3) | (((blk->hmask[i] >> j) & 1) << 2));
      return;
    }
    case GgmlType::Q5_K: {
      const BlockQ5_K* blk = reinterpret_cast<const BlockQ5_K*>(row) + b / 8;
      const uint8_t* qs = blk->qs + 32 * (j / 2);
      for (int i = 0; i < 32; ++i)
        u[i] = static_cast<uint8_t>(((qs[i] >> (4 * (j % 2))) & 15) | (((blk->qh[i] >> j) & 1) << 4));
      return;
    }
    default: return;
  }
}

// Decodes 32-element block b (0-based, in units of 32 elements) of a weight row.
static inline void decode_block32(GgmlType t, const uint8_t* row, int64_t b, uint8_t* u, float& s0, float& s1,
                                  float& m0, float& m1) {
  s0 = s1 = m0 = m1 = 0.f;
  switch (t) {
    case GgmlType::Q8_0: {
      const BlockQ8_0* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(blk->qs[i]) ^ 0x80;
      s0 = s1 = half_to_float(blk->d);
      return;
    }
    case GgmlType::Q4_0: {
      const BlockQ4_0* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      for (int i = 0; i < 16; ++i) u[i] = blk->qs[i] & 15, u[i + 16] = blk->qs[i] >> 4;
      s0 = s1 = half_to_float(blk->d);
      return;
    }
    case GgmlType::Q4_K: {
      const BlockQ4_K* blk = reinterpret_cast<const BlockQ4_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8);
      const uint8_t* qs = blk->qs + 32 * (j / 2);
      const int shift = 4 * (j & 1);
      for (int i = 0; i < 32; ++i) u[i] = (qs[i] >> shift) & 15;
      int sc, mn;
      q4k_scale_min(j, blk->scales, sc, mn);
      s0 = s1 = half_to_float(blk->d) * static_cast<float>(sc);
      m0 = m1 = half_to_float(blk->dmin) * static_cast<float>(mn);
      return;
    }
    case GgmlType::Q6_K: {
      const BlockQ6_K* blk = reinterpret_cast<const BlockQ6_K*>(row) + b / 8;
      const int j = static_cast<int>(b % 8), h = j / 4, p = j % 4;
      const uint8_t* ql = blk->ql + 64 * h + 32 * (p & 1);
      const uint8_t* qh = blk->qh + 32 * h;
      const int nib = 4 * (p >> 1), hs = 2 * p;
      for (int i = 0; i < 32; ++i) u[i] = static_cast<uint8_t>(((ql[i] >> nib) & 15) | (((qh[i] >> hs) & 3) << 4));
      const float d = half_to_float(blk->d);
      s0 = d * static_cast<float>(blk->scales[2 * j]);
      s1 = d * static_cast<float>(blk->scales[2 * j + 1]);
      return;
    }
    default: {
      block_values(t, row, b, u);
      const BlockScales bs = block_scales(t, row, b);
      s0 = bs.s0, s1 = bs.s1, m0 = bs.m0, m1 = bs.m1;
      return;
    }
  }
}

// acc += this block's contribution, in the one order all ISAs use.
static inline float accumulate_block(GgmlType t, const uint8_t* u, float s0, float s1, float m0, float m1,
                                     const int8_t* xq, float dx, int xs0, int xs1, float acc) {
  const int off = weight_offset(t);
  int32_t i0 = 0, i1 = 0;
  for (int e = 0; e < 16; ++e) i0 += u[e] * xq[e];
  for (int e = 16; e < 32; ++e) i1 += u[e] * xq[e];
  if (half_scales(t)) {
    acc = std::fma(static_cast<float>(i0 - off * xs0), s0 * dx, acc);
    acc = std::fma(static_cast<float>(i1 - off * xs1), s1 * dx, acc);
    if (half_mins(t)) {
      acc = std::fma(-static_cast<float>(xs0), m0 * dx, acc);
      acc = std::fma(-static_cast<float>(xs1), m1 * dx, acc);
    }
    return acc;
  }
  acc = std::fma(static_cast<float>(i0 + i1 - off * (xs0 + xs1)), s0 * dx, acc);
  if (block_min(t)) acc = std::fma(-static_cast<float>(xs0 + xs1), m0 * dx, acc);
  return acc;
}

}  // namespace pagoda::cpu::detail
