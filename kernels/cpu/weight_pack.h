// Decode layouts: Q4_0, Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0 weight matrices re-laid once at load
// so that the AVX2 decode kernels (matmul_rows_avx2.cpp) read 8 rows' blocks from one place and
// form 8 rows' block sums in the 8 int32 lanes of a register, without the per-block unpacking of
// the GGML layout and without a cross-lane reduction per block (on AVX2 hosts those made decode
// of these types compute-bound at ~50-73% of the memory bandwidth).
//
// The packed matrix has exactly the GGML matrix's size: rows in groups of 8, each group stored as
// one "tile" per 256-element super-block, holding the same bits moved around. In every tile a
// "register" is 32 bytes whose bytes 4l..4l+3 belong to row l, and register c of a 32-element
// block holds its elements 4c..4c+3 (a vpmaddubsw against 4 activation bytes broadcast to every
// lane leaves row l's partial sum in lane l). The bit-level spelling of each tile is written
// once, in weight_pack.cpp (kquant_move_header, q4_0_move_tile, q4k_move_tile, q5k_move_tile, q6k_move_tile,
// iq4xs_move_tile, q8_0_move_tile):
//   Q4_K (8 x 144 = 1152 bytes): a 128-byte header (the 8 rows' fp16 d and dmin, then their
//     6-bit scales and mins pre-transposed for the float epilogue); per block 128 bytes, 4
//     registers whose low nibbles are registers 0-3 and high nibbles registers 4-7.
//   Q5_K (8 x 176 = 1408 bytes): the same header; per block 160 bytes, the 5-bit quants whole in
//     4 registers plus a fifth holding the low 2 bits of registers 4-7.
//   Q6_K (8 x 210 = 1680 bytes): the 8 rows' fp16 d, then their int8 sub-block scales (144 bytes
//     in all); per block 192 bytes, Q4_K's nibble registers for the low 4 bits and two registers
//     holding the top 2 bits of registers 0-3 and 4-7.
//   IQ4_XS (8 x 136 = 1088 bytes): a 64-byte header (fp16 d, the 6-bit scales pre-transposed);
//     per block 128 bytes of level indices as Q4_K's.
//   Q4_0 (8 x 8 x 18 = 1152 bytes, 8 blocks): the 8 blocks' fp16 d for the 8 rows (128 bytes);
//     per block Q4_K's nibble registers.
//   Q8_0 (8 x 8 x 34 = 2176 bytes, 8 blocks): the 8 blocks' fp16 d for the 8 rows (128 bytes);
//     per block 256 bytes, 8 registers of the int8 quants.
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
