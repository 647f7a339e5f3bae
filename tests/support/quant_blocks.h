// Quantized weight matrices for the kernel tests with every bit pattern in them: random bytes in
// the quants and sub-block scales, the fp16 scale fields of each GGML block set to one finite
// value (random bytes there would give NaN and infinity, which compare by bits only by luck).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quants.h"
#include "kernels/ggml_type.h"

namespace pagoda::test {

// Sets every fp16 scale field (d, and dmin or m where the type has one) of the GGML block at blk.
inline void set_block_halves(GgmlType t, uint8_t* blk, uint16_t h) {
  auto set = [&](size_t off) { std::memcpy(blk + off, &h, 2); };
  using namespace pagoda::cpu;
  switch (t) {
    case GgmlType::Q8_0: set(offsetof(BlockQ8_0, d)); break;
    case GgmlType::Q4_0: set(offsetof(BlockQ4_0, d)); break;
    case GgmlType::Q4_1: set(offsetof(BlockQ4_1, d)), set(offsetof(BlockQ4_1, m)); break;
    case GgmlType::Q5_0: set(offsetof(BlockQ5_0, d)); break;
    case GgmlType::Q5_1: set(offsetof(BlockQ5_1, d)), set(offsetof(BlockQ5_1, m)); break;
    case GgmlType::IQ4_NL: set(offsetof(BlockIQ4_NL, d)); break;
    case GgmlType::IQ4_XS: set(offsetof(BlockIQ4_XS, d)); break;
    case GgmlType::Q2_K: set(offsetof(BlockQ2_K, d)), set(offsetof(BlockQ2_K, dmin)); break;
    case GgmlType::Q3_K: set(offsetof(BlockQ3_K, d)); break;
    case GgmlType::Q4_K: set(offsetof(BlockQ4_K, d)), set(offsetof(BlockQ4_K, dmin)); break;
    case GgmlType::Q5_K: set(offsetof(BlockQ5_K, d)), set(offsetof(BlockQ5_K, dmin)); break;
    case GgmlType::Q6_K: set(offsetof(BlockQ6_K, d)); break;
    default: break;
  }
}

// rows x cols of quantized type t: random bytes, then every block's fp16 fields set to h.
inline std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t cols, uint32_t seed, uint16_t h) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  std::vector<uint8_t> w(ggml_row_size(t, cols) * static_cast<size_t>(rows));
  std::mt19937 rng(seed);
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < w.size() / info.type_size; ++b) set_block_halves(t, &w[b * info.type_size], h);
  return w;
}

// rows x cols of quantized type t made by quantize_row from normal values, row o scaled by
// 1 + o % 5: valid blocks of real-looking weights.
inline std::vector<uint8_t> quantized_normal_rows(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t row_bytes = ggml_row_size(t, cols);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t o = 0; o < rows; ++o) {
    for (auto& v : tmp) v = nd(rng) * (1.f + static_cast<float>(o % 5));
    cpu::quantize_row(t, tmp.data(), w.data() + o * row_bytes, cols);
  }
  return w;
}

}  // namespace pagoda::test
