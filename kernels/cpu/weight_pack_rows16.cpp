// The Rows16 decode layout of Q8_0 matrices (weight_pack.h): packing and its exact inverse.
// Portable code (no ISA flags): it runs once per matrix at load, at memory speed.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"

namespace pagoda::cpu::detail {

static_assert(sizeof(BlockQ8_0) == 34 && kRows16PairBytes == 2 * kRows16Rows * sizeof(BlockQ8_0),
              "a pair of Rows16 blocks holds exactly 16 rows' two GGML blocks");

void move_matrix_rows16(int64_t rows, int64_t cols, uint8_t* ggml, uint8_t* packed, bool to_packed, ThreadPool* pool) {
  constexpr int64_t R = static_cast<int64_t>(kRows16Rows);
  const size_t row_bytes = ggml_row_size(GgmlType::Q8_0, cols);
  const int64_t pairs = cols / 64, groups = rows / R;
  auto move_groups = [&](int64_t g_begin, int64_t g_end, int) {
    for (int64_t g = g_begin; g < g_end; ++g) {
      uint8_t* group = packed + static_cast<size_t>(g * R) * row_bytes;
      for (int64_t p = 0; p < pairs; ++p) {
        uint8_t* pair = group + static_cast<size_t>(p) * kRows16PairBytes;
        for (int64_t l = 0; l < R; ++l)
          for (int h = 0; h < 2; ++h) {
            auto* blk = reinterpret_cast<BlockQ8_0*>(ggml + static_cast<size_t>(g * R + l) * row_bytes) + 2 * p + h;
            uint8_t* regs = pair + 512 * h;
            uint8_t* d = pair + kRows16ScaleOffset + 32 * h + 2 * l;
            // Quants 4c..4c+3 of the row <-> bytes 4l..4l+3 of register c, sign bits flipped.
            for (int c = 0; c < 8; ++c) {
              uint32_t v;
              std::memcpy(&v, to_packed ? static_cast<const void*>(blk->qs + 4 * c) : regs + 64 * c + 4 * l, 4);
              v ^= 0x80808080u;
              std::memcpy(to_packed ? static_cast<void*>(regs + 64 * c + 4 * l) : blk->qs + 4 * c, &v, 4);
            }
            if (to_packed) std::memcpy(d, &blk->d, 2);
            else std::memcpy(&blk->d, d, 2);
          }
      }
    }
  };
  if (pool != nullptr) pool->parallel_for(groups, move_groups);
  else move_groups(0, groups, 0);
  const size_t done = static_cast<size_t>(groups * R) * row_bytes, all = static_cast<size_t>(rows) * row_bytes;
  if (to_packed) std::memcpy(packed + done, ggml + done, all - done);
  else std::memcpy(ggml + done, packed + done, all - done);
}

}  // namespace pagoda::cpu::detail
