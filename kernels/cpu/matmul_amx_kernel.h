// The AMX-INT8 prefill kernel, written once over a tile-operations policy `Ops`, so that the very
// same body runs on the real tiles (matmul_amx.cpp: AmxTileOps, the intrinsics) and on the tests'
// tile emulator (tests/support/amx_tile_emu.h) on hosts without AMX.
//
// Computes outputs [o_begin, o_end) of out = x * w^T (matmul.h) for quantized weights and
// n > kFewRowsMax activation rows, bit-identical to the AVX-512 prefill (matmul_avx512.cpp) and
// to the scalar reference: per (row, output) pair and 32-element block the integer sum of
// u * x (u the decoded weight bytes, x the int8 activations) is exact on either unit, and the
// float epilogue here is panel_kernel's, operation for operation: acc = fma(float(sum -
// offset * sum(x)), s * dx, acc) per block (per 16-element half for the half-scale types), then
// the min terms acc = fnma(xsum, m * dx, acc).
//
// Tile shapes (palette 1), K = 32 elements per step (16 for the half-scale types Q2_K, Q3_K,
// Q6_K, whose halves have their own scales, so one step per half):
//   A  tmm4, tmm5: 16 activation rows x K int8 bytes, loaded straight from the quantized
//      activations (stride k): rows i..i+15 and i+16..i+31.
//   B  tmm6, tmm7: K/4 rows x 64 bytes, the weights of outputs 0-15 / 16-31 of the 32-output
//      weight tile of matmul_tile_avx512.h in VNNI layout (row g, column l: elements 4g..4g+3 of
//      output l as u bytes), read in place with a stride of 128 bytes.
//   C  tmm0-tmm3: 16 rows x 16 int32, one per (row group, output half): zeroed, then one
//      TDPBSUD (A signed, B unsigned) per step, stored to a 32 x 32 int32 buffer for the
//      AVX-512 epilogue. Every block has its own scales, so the sums leave the tiles per step.
// The configuration is loaded once per range call (each chunk of outputs a thread takes) and
// released at its end, so no tile state outlives a call.
//
// Assumptions: the caller (run_matmul) pads the quantized activations to amx_padded_rows(n)
// rows with zero rows (a tile loads 16 rows; the padded rows' results are never stored); outputs
// start at a multiple of 16 (the dispatcher splits them by 32); include only from translation
// units compiled with the AVX-512 flags (the epilogue and the weight tile are AVX-512 code).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/cpu/matmul_amx_tiles.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/matmul_tile_avx512.h"

namespace pagoda::cpu::detail {

namespace {

// The policy's interface (see AmxTileOps in matmul_amx.cpp): config(TileConfig), zero<t>(),
// load<t>(base, stride), store<t>(base, stride), dpbsud<c, a, b>(), release().
template <class Ops, GgmlType T>
void amx_quant_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  constexpr int K = half_scales(T) ? 16 : 32;  // elements per step
  constexpr int kSteps = 32 / K;
  constexpr int kGroupRows = 2 * static_cast<int>(kAmxRows);  // two A tiles share the B tiles
  constexpr size_t kBStride = sizeof(Tile::qs[0][0]);         // 128: from register g to g + 1
  const int off = weight_offset(T);
  auto tile = new_tile();
  // Rows in blocks whose int8 activations fill about half of this core's L2, so that every
  // weight tile of the block re-reads them from L2.
  const int64_t l2_share = static_cast<int64_t>(cpu_caches().l2 / 2);
  const int64_t block_rows = std::max<int64_t>(kGroupRows, l2_share / a.k / kGroupRows * kGroupRows);
  alignas(64) int32_t sums[kGroupRows][kLanes];
  alignas(64) float acc[kGroupRows][kLanes];
  Ops ops;
  ops.config(amx_tile_config(K));
  for_each_tile_chunk<T>(a, o_begin, o_end, block_rows, *tile,
                         [&](const Tile& t, int64_t o0, int valid, int64_t b0, int nblk, int64_t r0, int64_t r1,
                             const LinePrefetch& pf) {
    pf.all();
    const __mmask16 m0 = lane_mask(valid), m1 = lane_mask(valid - 16);
    for (int64_t i = r0; i < r1; i += kGroupRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kGroupRows, r1 - i));
      const bool two = rows > kAmxRows;
      float* out = a.out + i * a.out_features + o0;
      for (int r = 0; r < rows; ++r) {
        const bool load = b0 != 0;
        _mm512_store_ps(acc[r], load ? _mm512_maskz_loadu_ps(m0, out + r * a.out_features) : _mm512_setzero_ps());
        _mm512_store_ps(acc[r] + 16, load ? _mm512_maskz_loadu_ps(m1, out + r * a.out_features + 16) : _mm512_setzero_ps());
      }
      for (int b = 0; b < nblk; ++b) {
        const int64_t blk = b0 + b;
        const int8_t* xa = a.acts.row_q(i) + 32 * blk;
        for (int h = 0; h < kSteps; ++h) {
          ops.template load<kB0>(&t.qs[b][h * K / 4][0][0], kBStride);
          ops.template load<kB1>(&t.qs[b][h * K / 4][16][0], kBStride);
          ops.template load<kA0>(xa + K * h, static_cast<size_t>(a.k));
          ops.template zero<kC00>();
          ops.template zero<kC01>();
          ops.template dpbsud<kC00, kA0, kB0>();
          ops.template dpbsud<kC01, kA0, kB1>();
          ops.template store<kC00>(&sums[0][0], sizeof(sums[0]));
          ops.template store<kC01>(&sums[0][16], sizeof(sums[0]));
          if (two) {
            ops.template load<kA1>(xa + kAmxRows * a.k + K * h, static_cast<size_t>(a.k));
            ops.template zero<kC10>();
            ops.template zero<kC11>();
            ops.template dpbsud<kC10, kA1, kB0>();
            ops.template dpbsud<kC11, kA1, kB1>();
            ops.template store<kC10>(&sums[kAmxRows][0], sizeof(sums[0]));
            ops.template store<kC11>(&sums[kAmxRows][16], sizeof(sums[0]));
          }
          // acc += float(sum - offset * sum(x)) * (s * dx): the scale of this half (half-scale
          // types) or of the block.
          const float* sc = h == 0 ? t.s0[b] : t.s1[b];
          const __m512 s0 = _mm512_load_ps(sc), s1 = _mm512_load_ps(sc + 16);
          for (int r = 0; r < rows; ++r) {
            const int16_t* xs = a.acts.row_s(i + r) + 2 * blk;
            const __m512i seed = _mm512_set1_epi32(-off * (K == 16 ? xs[h] : xs[0] + xs[1]));
            const __m512 d = _mm512_set1_ps(a.acts.row_d(i + r)[blk]);
            const __m512 i0 = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(sums[r]), seed));
            const __m512 i1 = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_load_si512(sums[r] + 16), seed));
            _mm512_store_ps(acc[r], _mm512_fmadd_ps(i0, _mm512_mul_ps(s0, d), _mm512_load_ps(acc[r])));
            _mm512_store_ps(acc[r] + 16, _mm512_fmadd_ps(i1, _mm512_mul_ps(s1, d), _mm512_load_ps(acc[r] + 16)));
          }
        }
        // The min terms, after the scale terms: acc -= xsum * (m * dx), per block (block_min
        // types) or per half (Q2_K).
        if constexpr (block_min(T) || half_mins(T)) {
          constexpr int kMins = half_mins(T) ? 2 : 1;
          for (int h = 0; h < kMins; ++h) {
            const float* mn = h == 0 ? t.m[b] : t.m1[b];
            const __m512 mn0 = _mm512_load_ps(mn), mn1 = _mm512_load_ps(mn + 16);
            for (int r = 0; r < rows; ++r) {
              const int16_t* xs = a.acts.row_s(i + r) + 2 * blk;
              const __m512 xsum = _mm512_set1_ps(static_cast<float>(kMins == 2 ? xs[h] : xs[0] + xs[1]));
              const __m512 d = _mm512_set1_ps(a.acts.row_d(i + r)[blk]);
              _mm512_store_ps(acc[r], _mm512_fnmadd_ps(xsum, _mm512_mul_ps(mn0, d), _mm512_load_ps(acc[r])));
              _mm512_store_ps(acc[r] + 16, _mm512_fnmadd_ps(xsum, _mm512_mul_ps(mn1, d), _mm512_load_ps(acc[r] + 16)));
            }
          }
        }
      }
      for (int r = 0; r < rows; ++r) {
        _mm512_mask_storeu_ps(out + r * a.out_features, m0, _mm512_load_ps(acc[r]));
        _mm512_mask_storeu_ps(out + r * a.out_features + 16, m1, _mm512_load_ps(acc[r] + 16));
      }
    }
  });
  ops.release();
}

// Outputs [o_begin, o_end) of a quantized prefill call on the tiles of policy Ops.
template <class Ops>
void amx_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return amx_quant_range<Ops, GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: throw std::logic_error("matmul: the AMX kernel takes only the int8-kernel weight types");
  }
}

}  // namespace
}  // namespace pagoda::cpu::detail
