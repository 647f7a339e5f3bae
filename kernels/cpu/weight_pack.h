// Decode layouts: quantized weight matrices (every type of PAGODA_INT8_WEIGHT_TYPES) re-laid once
// at load so that the AVX2 decode kernels (matmul_packed_avx2.cpp) read 8 rows' blocks from one
// place and form 8 rows' block sums in the 8 int32 lanes of a register, without the per-block
// unpacking of the GGML layout and without a cross-lane reduction per block (on AVX2 hosts those
// made decode of these types compute-bound at 9-73% of the memory bandwidth).
//
// The packed matrix has exactly the GGML matrix's size: rows in groups of 8, each group stored as
// one "tile" per 256-element super-block (8 blocks for the 32-element-block types), holding the
// same bits moved around. In every tile a "register" is 32 bytes whose bytes 4l..4l+3 belong to
// row l, and register c of a 32-element block holds its elements 4c..4c+3 (a vpmaddubsw against 4
// activation bytes broadcast to every lane leaves row l's partial sum in lane l). The bit-level
// spelling of each tile is written once, in weight_pack.cpp (*_move_tile):
//   Q4_K (8 x 144 = 1152 bytes): a 128-byte header (the 8 rows' fp16 d and dmin, then their
//     6-bit scales and mins pre-transposed for the float epilogue); per block 128 bytes, 4
//     "nibble registers" whose low nibbles are registers 0-3 and high nibbles registers 4-7.
//   Q5_K (8 x 176 = 1408 bytes): the same header; per block 160 bytes, "5-bit registers": the
//     quants whole in 4 registers plus a fifth holding the low 2 bits of registers 4-7.
//   Q6_K (8 x 210 = 1680 bytes): the 8 rows' fp16 d, then their int8 sub-block scales (144 bytes
//     in all); per block 192 bytes, nibble registers for the low 4 bits and two registers
//     holding the top 2 bits of registers 0-3 and 4-7.
//   Q3_K (8 x 110 = 880 bytes): fp16 d, the 16 six-bit sub-block scales of each row (96 bytes);
//     per block 96 bytes, 3 registers whose 3-bit nibbles are registers 0-2 and 4-6 and whose
//     spare bits 3 and 7 hold registers 3 and 7.
//   Q2_K (8 x 84 = 672 bytes): fp16 d and dmin, the scale bytes per sub-block (160 bytes); per
//     block 64 bytes, 2 registers holding the 2-bit quants of registers 0-3 and 4-7.
//   IQ4_XS (8 x 136 = 1088 bytes): a 64-byte header (fp16 d, the 6-bit scales pre-transposed);
//     per block 128 bytes of level indices as nibble registers.
//   Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1, Q8_0 (8 x 8 x their block: 1152, 1280, 1152, 1408, 1536, 2176
//     bytes): the 8 blocks' fp16 d for the 8 rows (128 bytes), for Q4_1 / Q5_1 their fp16 m
//     (128 bytes); per block nibble registers (Q4_0, Q4_1, IQ4_NL), 5-bit registers (Q5_0, Q5_1)
//     or 8 registers of the int8 quants (Q8_0).
// Tiles go group by group, super-blocks in order within a group; rows past the last full group
// of 8 stay in the GGML layout at their usual offsets (o * row bytes).
//
// The AVX2 kernels read this layout (DecodeLayout::Tiles8) at every batch size: the decode kernels
// directly, the prefill tile by unpacking whole tiles (unpack_packed_tile_avx2).
//
// DecodeLayout::Rows16, read by the AVX-512 kernels, for Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K and
// IQ4_XS: rows in groups of 16, each group stored as one "unit" after another, a unit holding the
// 16 rows' GGML bytes of one run of 32-element blocks whose scales decode together (two blocks
// for Q8_0, Q4_0 and IQ4_NL, a 256-element super-block for the K-quants and IQ4_XS). Its quants
// are "registers" of 64 bytes whose bytes 4l..4l+3 belong to row l, so one vpdpbusd against an
// activation dword broadcast to every lane advances 16 outputs by 4 products, and after the 8
// registers of a 32-element block lane l holds row l's block sum: no per-block reduction (the
// GGML layout's few-rows kernels spent most of a 16-sequence decode step on those), no per-row
// pointers. Per unit:
//   Q8_0 (1088 bytes = 16 x 2 blocks): [0, 512) block 0 as 8 registers, register c holding the
//     quants 4c..4c+3 as q + 128 (unsigned bytes, vpdpbusd's weight operand), [512, 1024) block 1
//     the same, [1024, 1056) block 0's 16 fp16 d in row order, [1056, 1088) block 1's.
//   Q4_0, IQ4_NL (576 bytes = 16 x 2 blocks): [0, 256) block 0 as 4 nibble registers, register c
//     holding the row's qs[4c .. +3], whose low nibbles are elements 4c..4c+3 and high nibbles
//     elements 16 + 4c..; [256, 512) block 1; [512, 544) and [544, 576) the blocks' 16 fp16 d.
//   Q4_K (2304 bytes = 16 x 144): [0, 2048) "nibble registers", 8 per 64-byte chunk p of qs:
//     register c of chunk p holds the row's qs[32p + 4c .. +3], whose low nibbles are elements
//     4c..4c+3 of block 2p and high nibbles those of block 2p + 1; [2048, 2080) the 16 fp16 d,
//     [2080, 2112) the 16 fp16 dmin; [2112, 2304) the 16 six-bit values (sc0..7, mn0..7 of
//     q4k_scale_min) of every row in three 64-byte vectors P0..P2: value v = 4k + i (k < 3) of
//     row l is the low 6 bits of Pk's byte 16 * (l / 4) + 4i + l % 4, and value 12 + i holds its
//     bits 2k, 2k + 1 in that byte's top 2 bits (a byte shuffle within 128-bit lanes then puts a
//     value of the 16 rows in the 16 dword lanes).
//   Q6_K (3360 bytes = 16 x 210): [0, 3072) 16 "triples" of registers A, B, C (192 bytes), triple
//     (h, c) at 192 (8h + c) holding register c of the 4 blocks 4h..4h+3 (the blocks whose bits
//     GGML interleaves in ql[64h ..] and qh[32h ..]): with v0..v3 the 6-bit values of one byte
//     position, A = v0 | (v1 >> 4) << 6, B = (v1 & 15) | (v3 >> 2) << 4, C = (v3 & 3) | v2 << 2,
//     so that each value is one or two shifts and masks away and every byte is read once
//     (weight_pack_rows16.cpp moves the bits, matmul_rows16_avx512.cpp unpacks them);
//     [3072, 3328) the 16 int8 scales of each sub-block s for the 16 rows at 3072 + 16s,
//     [3328, 3360) the 16 fp16 d.
//   IQ4_XS (2176 bytes = 16 x 136): [0, 2048) block j's nibble registers at 256j as Q4_0's;
//     [2048, 2080) the 16 fp16 d; [2080, 2176) the 8 six-bit scales (iq4xs_scale) of each row:
//     scale i (< 4) of row l is the low 6 bits of P's byte 16 * (l / 4) + 4i + l % 4 (64 bytes),
//     scale 4 + i has its low 2 bits in that byte's top bits and its high 4 bits in a nibble of the
//     32 bytes after P (byte b % 32, the high nibble for b >= 32).
// Units of every type but Q6_K sit on cache lines; Q6_K's (3360 bytes) do when an even count of
// units precedes them, and all are read with unaligned loads.
// The AVX-512 prefill tile copies a group's registers (unpacked) as its half of 16 lanes.
//
// Levels whose layout a PackedWeight is not read `source`, the matrix in its GGML layout (see
// decode_layout_for), so on hosts whose level reads the copy the GGML pages of a packed matrix go
// unused once it is packed (CpuBackend unmaps them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_type.h"

namespace pagoda::cpu {

// The tile geometry of the layout above, which the packing code (weight_pack.cpp) and the kernels
// that read it (matmul_packed_avx2.cpp) both take from here: a tile is a header of
// packed_head_bytes(t) (the scales), then its 8 blocks' quants, packed_block_bytes(t) each.
// weight_pack.cpp checks that every tile spans exactly 8 rows' GGML bytes of 256 elements.
constexpr size_t packed_head_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: return 128;
    case GgmlType::IQ4_XS: return 64;
    case GgmlType::Q6_K: return 144;
    case GgmlType::Q3_K: return 112;
    case GgmlType::Q2_K: return 160;
    case GgmlType::Q4_1: case GgmlType::Q5_1: return 256;  // d and m of the 8 blocks
    default: return 128;                                    // d of the 8 blocks
  }
}
constexpr size_t packed_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q5_K: case GgmlType::Q5_0: case GgmlType::Q5_1: return 160;  // 5-bit registers
    case GgmlType::Q6_K: return 192;
    case GgmlType::Q3_K: return 96;
    case GgmlType::Q2_K: return 64;
    case GgmlType::Q8_0: return 256;
    default: return 128;  // nibble registers
  }
}
constexpr size_t packed_tile_bytes(GgmlType t) { return packed_head_bytes(t) + 8 * packed_block_bytes(t); }

struct PackedBytesFree {
  void operator()(uint8_t* p) const;
};

// Rows16's geometry (the layout above), from here for the packing code (weight_pack_rows16.cpp)
// and the AVX-512 kernels that read it (matmul_rows16_avx512.cpp).
constexpr size_t kRows16Rows = 16;
constexpr bool rows16_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::IQ4_NL || t == GgmlType::Q4_K || t == GgmlType::Q6_K ||
         t == GgmlType::IQ4_XS;
}
// 32-element blocks per unit, and its bytes (16 rows' GGML bytes of those blocks).
constexpr int rows16_unit_blocks(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::IQ4_NL ? 2 : 8;
}
constexpr size_t rows16_unit_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return kRows16Rows * 2 * 34;
    case GgmlType::Q4_0: case GgmlType::IQ4_NL: return kRows16Rows * 2 * 18;
    case GgmlType::Q4_K: return kRows16Rows * 144;
    case GgmlType::Q6_K: return kRows16Rows * 210;
    default: return kRows16Rows * 136;  // IQ4_XS
  }
}
constexpr size_t kRows16Q8ScaleOffset = 1024;  // Q8_0: the blocks' d
constexpr size_t kRows16Q4KHeadOffset = 2048;  // Q4_K: d, dmin, then the six-bit values
constexpr size_t kRows16Q6KTripleBytes = 192;  // Q6_K: the register triples, scales, d
constexpr size_t kRows16Q6KScaleOffset = 16 * kRows16Q6KTripleBytes;
constexpr size_t kRows16Q6KDOffset = 3328;
constexpr size_t kRows16Q4ScaleOffset = 512;     // Q4_0, IQ4_NL: the blocks' d
constexpr size_t kRows16IQ4XSHeadOffset = 2048;  // IQ4_XS: d, then the six-bit scales

// The decode layouts above, and the kernel level that reads each.
enum class DecodeLayout : uint8_t { Tiles8, Rows16 };
constexpr int decode_layout_rows(DecodeLayout l) { return l == DecodeLayout::Rows16 ? static_cast<int>(kRows16Rows) : 8; }
constexpr CpuIsa decode_layout_isa(DecodeLayout l) { return l == DecodeLayout::Rows16 ? CpuIsa::Avx512 : CpuIsa::Avx2; }

struct PackedWeight {
  DecodeLayout layout = DecodeLayout::Tiles8;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  const void* source = nullptr;  // the same matrix in its GGML layout (not owned; must outlive this)
  std::unique_ptr<uint8_t[], PackedBytesFree> bytes;  // 64-byte aligned, ggml_row_size * rows
  size_t size = 0;
};

// True when t has layout `l` and the shape allows it. Tiles8: cols a multiple of 256, at least 8
// rows (the tiles of the 32-element-block types span 256 elements too). Rows16: rows16_type(t),
// whole units (cols a multiple of 64 for Q8_0, Q4_0 and IQ4_NL, of 256 for the others), at least
// 16 rows.
bool decode_pack_supported(GgmlType t, int64_t rows, int64_t cols, DecodeLayout l = DecodeLayout::Tiles8);

// The layout that pays at kernel level `isa` for t and this shape, if any: Tiles8 for every type
// at AVX2; Rows16 for its types at AVX-512 and AMX (the other types' AVX-512 few-rows kernels read the
// GGML layout, with a cross-lane reduction per block).
std::optional<DecodeLayout> decode_layout_for(CpuIsa isa, GgmlType t, int64_t rows, int64_t cols);
inline bool decode_pack_useful(CpuIsa isa, GgmlType t, int64_t rows, int64_t cols) {
  return decode_layout_for(isa, t, rows, cols).has_value();
}

// Packs `w` (rows x cols of type t, GGML layout) into layout `l`, spread over `pool` when given
// (0.3-0.9 GB/s per thread by type: pagoda_bench_kernels prints it). Throws
// std::invalid_argument when !decode_pack_supported(t, rows, cols, l).
PackedWeight pack_for_decode(GgmlType t, const void* w, int64_t rows, int64_t cols, ThreadPool* pool = nullptr,
                             DecodeLayout l = DecodeLayout::Tiles8);

namespace detail {
// Moves the full groups of 16 rows of a matrix of type t between `ggml` and the Rows16 layout in
// `packed` (to_packed says which way) and copies the rows past them as they are.
void move_matrix_rows16(GgmlType t, int64_t rows, int64_t cols, uint8_t* ggml, uint8_t* packed, bool to_packed, ThreadPool* pool);
}  // namespace detail

// The GGML layout back from a packed matrix (p.size bytes into out): the exact inverse.
void unpack_from_decode(const PackedWeight& p, void* out);

}  // namespace pagoda::cpu
