// Decode layouts: Q5_K, IQ4_XS and Q8_0 weight matrices re-laid once at load so that the AVX2 decode
// kernels (matmul_rows_avx2.cpp) read 8 rows' blocks from one place and form 8 rows' block sums
// in the 8 int32 lanes of a register, without the per-block unpacking of the GGML layout and
// without a cross-lane reduction per block (on AVX2 hosts those made decode of these types
// compute-bound at ~50-67% of the memory bandwidth).
//
// The packed matrix has exactly the GGML matrix's size: rows in groups of 8, each group stored as
// one "tile" per 256-element super-block, holding the same bits moved around:
//   Q5_K tile (8 x 176 = 1408 bytes):
//     [0, 128)     the 8 rows' 16-byte headers (d, dmin, scales[12] as stored) in the row order
//                  0, 4, 1, 5, 2, 6, 3, 7 (a 32-byte load gives rows k and 4 + k);
//     [128, 1152)  qs: for chunk p (0..3, blocks 2p and 2p + 1) and c (0..7), 32 bytes whose
//                  bytes 4l..4l+3 are row l's qs[32p + 4c .. 32p + 4c + 3] (low nibbles:
//                  elements 4c.. of block 2p; high nibbles: of block 2p + 1);
//     [1152, 1408) qh: for block j, 32 bytes whose byte 4l + e has in bit c the fifth bit of
//                  element 4c + e of block j of row l (bit j of that row's qh[4c + e]).
//   IQ4_XS tile (8 x 136 = 1088 bytes):
//     [0, 64)      the 8 rows' 8-byte headers (d, scales_h, scales_l) in the row order
//                  0, 1, 4, 5, 2, 3, 6, 7;
//     [64, 1088)   qs: for block j and c (0..3), 32 bytes whose bytes 4l..4l+3 are row l's
//                  qs[16j + 4c .. 16j + 4c + 3] (low nibbles: elements 4c..; high: 16 + 4c..).
//   Q8_0 tile, per 256 elements (8 blocks) of 8 rows (8 x 8 x 34 = 2176 bytes):
//     [0, 128)     for block j, the 8 rows' fp16 d in row order (16 bytes);
//     [128, 2176)  qs: for block j and c (0..7), 32 bytes whose bytes 4l..4l+3 are row l's
//                  qs[4c .. 4c + 3] of that block.
// Tiles go group by group, super-blocks in order within a group; rows past the last full group
// of 8 stay in the GGML layout at their usual offsets (o * row bytes).
//
// Only the AVX2 decode kernels read this layout; every other path (prefill, the scalar and
// AVX-512 levels) reads `source`, the matrix in its GGML layout, so a packed matrix costs its
// size again in memory (see decode_pack_useful).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_type.h"

namespace pagoda::cpu {

struct PackedBytesFree {
  void operator()(uint8_t* p) const;
};

struct PackedWeight {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  const void* source = nullptr;  // the same matrix in its GGML layout (not owned; must outlive this)
  std::unique_ptr<uint8_t[], PackedBytesFree> bytes;  // 64-byte aligned, ggml_row_size * rows
  size_t size = 0;
};

// True when t has a decode layout and the shape allows it (cols a multiple of 256, at least 8 rows;
// Q8_0's tiles span 256 elements too).
bool decode_pack_supported(GgmlType t, int64_t rows, int64_t cols);

// True when packing pays at kernel level `isa`: only the AVX2 decode kernels read the packed
// layout (the AVX-512 ones reach the bandwidth from the GGML layout).
bool decode_pack_useful(CpuIsa isa, GgmlType t, int64_t rows, int64_t cols);

// Packs `w` (rows x cols of type t, GGML layout), spread over `pool` when given (about 1 GB/s
// per thread). Throws std::invalid_argument when !decode_pack_supported(t, rows, cols).
PackedWeight pack_for_decode(GgmlType t, const void* w, int64_t rows, int64_t cols, ThreadPool* pool = nullptr);

// The GGML layout back from a packed matrix (p.size bytes into out): the exact inverse.
void unpack_from_decode(const PackedWeight& p, void* out);

}  // namespace pagoda::cpu
