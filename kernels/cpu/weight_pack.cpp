// Packing of Q5_K / IQ4_XS weight matrices into the decode layout described in weight_pack.h,
// and its inverse. One routine moves a tile's bytes in either direction, so packing and
// unpacking cannot drift apart.
#include "kernels/cpu/weight_pack.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/cpu/quants.h"

namespace pagoda::cpu {

void PackedBytesFree::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }

namespace {

constexpr int kRows = 8;
constexpr int64_t kSuper = 256;

// Bit (8r + c) <-> bit (8c + r) of x: byte r's bit c becomes byte c's bit r (an 8 x 8 bit
// transpose, its own inverse).
uint64_t transpose8x8(uint64_t x) {
  uint64_t t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAULL;
  x ^= t ^ (t << 7);
  t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCULL;
  x ^= t ^ (t << 14);
  t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ULL;
  x ^= t ^ (t << 28);
  return x;
}

// Moves n bytes between a row's block (at `row`) and the tile (at `tile`), either way.
void move(uint8_t* tile, uint8_t* row, size_t n, bool to_tile) {
  if (to_tile) std::memcpy(tile, row, n);
  else std::memcpy(row, tile, n);
}

// One tile (super-block s of rows blk[0..7], each pointing at that row's block s) <-> `tile`.
void move_tile(GgmlType t, uint8_t* const blk[kRows], uint8_t* tile, bool to_tile) {
  if (t == GgmlType::Q5_K) {
    constexpr int kDuoOrder[kRows] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int i = 0; i < kRows; ++i) move(tile + 16 * i, blk[kDuoOrder[i]], 16, to_tile);
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 8; ++c)
        for (int l = 0; l < kRows; ++l)
          move(tile + 128 + 256 * p + 32 * c + 4 * l, blk[l] + offsetof(BlockQ5_K, qs) + 32 * p + 4 * c, 4, to_tile);
    // qh: for row l and e, the 8 bytes qh[4c + e] (c = 0..7) and the 8 tile bytes of blocks
    // j = 0..7 at 32j + 4l + e are the same 8 x 8 bit matrix, transposed.
    uint8_t* tqh = tile + 1152;
    for (int l = 0; l < kRows; ++l) {
      uint8_t* qh = blk[l] + offsetof(BlockQ5_K, qh);
      for (int e = 0; e < 4; ++e) {
        uint64_t x = 0;
        for (int i = 0; i < 8; ++i) x |= uint64_t{to_tile ? qh[4 * i + e] : tqh[32 * i + 4 * l + e]} << (8 * i);
        x = transpose8x8(x);
        for (int i = 0; i < 8; ++i) (to_tile ? tqh[32 * i + 4 * l + e] : qh[4 * i + e]) = static_cast<uint8_t>(x >> (8 * i));
      }
    }
  } else {
    constexpr int kPairOrder[kRows] = {0, 1, 4, 5, 2, 3, 6, 7};
    for (int i = 0; i < kRows; ++i) move(tile + 8 * i, blk[kPairOrder[i]], 8, to_tile);
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < kRows; ++l)
          move(tile + 64 + 128 * j + 32 * c + 4 * l, blk[l] + offsetof(BlockIQ4_XS, qs) + 16 * j + 4 * c, 4, to_tile);
  }
}

// Moves every tile of a rows x cols matrix between `ggml` and `packed`, and copies the rows past
// the last full group as they are.
void move_matrix(GgmlType t, int64_t rows, int64_t cols, uint8_t* ggml, uint8_t* packed, bool to_tile) {
  const size_t row_bytes = ggml_row_size(t, cols);
  const size_t block_bytes = ggml_type_info(t).type_size;
  const int64_t supers = cols / kSuper, groups = rows / kRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = ggml + static_cast<size_t>(g * kRows) * row_bytes;
    uint8_t* tiles = packed + static_cast<size_t>(g * kRows) * row_bytes;
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* blk[kRows];
      for (int l = 0; l < kRows; ++l) blk[l] = group + l * row_bytes + s * block_bytes;
      move_tile(t, blk, tiles + s * kRows * block_bytes, to_tile);
    }
  }
  const size_t done = static_cast<size_t>(groups * kRows) * row_bytes, all = static_cast<size_t>(rows) * row_bytes;
  move(packed + done, ggml + done, all - done, to_tile);
}

}  // namespace

bool decode_pack_supported(GgmlType t, int64_t rows, int64_t cols) {
  return (t == GgmlType::Q5_K || t == GgmlType::IQ4_XS) && rows >= kRows && cols > 0 && cols % kSuper == 0;
}

bool decode_pack_useful(CpuIsa isa, GgmlType t, int64_t rows, int64_t cols) {
  return isa == CpuIsa::Avx2 && decode_pack_supported(t, rows, cols);
}

PackedWeight pack_for_decode(GgmlType t, const void* w, int64_t rows, int64_t cols) {
  if (!decode_pack_supported(t, rows, cols))
    throw std::invalid_argument(std::string("pack_for_decode: no decode layout for ") + ggml_type_info(t).name + " " +
                                std::to_string(rows) + " x " + std::to_string(cols));
  PackedWeight p;
  p.type = t, p.rows = rows, p.cols = cols, p.source = w;
  p.size = ggml_row_size(t, cols) * static_cast<size_t>(rows);
  p.bytes.reset(static_cast<uint8_t*>(::operator new[](p.size, std::align_val_t(64))));
  // move_matrix reads `ggml` when packing; the cast only lets one routine serve both directions.
  move_matrix(t, rows, cols, static_cast<uint8_t*>(const_cast<void*>(w)), p.bytes.get(), true);
  return p;
}

void unpack_from_decode(const PackedWeight& p, void* out) {
  move_matrix(p.type, p.rows, p.cols, static_cast<uint8_t*>(out), p.bytes.get(), false);
}

}  // namespace pagoda::cpu
