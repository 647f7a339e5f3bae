// Packing of the quantized weight matrices (every type the int8 kernels read) into the decode
// layout described in weight_pack.h, and its inverse. Both go through the decoded values of one
// tile (TileValues): the GGML blocks <-> values <-> the tile, each step written once per
// direction and checked as exact inverses by tests/unit/kernels/test_weight_pack.cpp.
#include "kernels/cpu/weight_pack.h"

#include <array>
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

// Every tile holds exactly 8 rows' GGML bytes of one super-block (weight_pack.h), so the packed
// matrix keeps the GGML matrix's size and row offsets.
static_assert(packed_tile_bytes(GgmlType::Q2_K) == kRows * sizeof(BlockQ2_K));
static_assert(packed_tile_bytes(GgmlType::Q3_K) == kRows * sizeof(BlockQ3_K));
static_assert(packed_tile_bytes(GgmlType::Q4_K) == kRows * sizeof(BlockQ4_K));
static_assert(packed_tile_bytes(GgmlType::Q5_K) == kRows * sizeof(BlockQ5_K));
static_assert(packed_tile_bytes(GgmlType::Q6_K) == kRows * sizeof(BlockQ6_K));
static_assert(packed_tile_bytes(GgmlType::IQ4_XS) == kRows * sizeof(BlockIQ4_XS));
static_assert(packed_tile_bytes(GgmlType::Q4_0) == kRows * 8 * sizeof(BlockQ4_0));
static_assert(packed_tile_bytes(GgmlType::Q4_1) == kRows * 8 * sizeof(BlockQ4_1));
static_assert(packed_tile_bytes(GgmlType::Q5_0) == kRows * 8 * sizeof(BlockQ5_0));
static_assert(packed_tile_bytes(GgmlType::Q5_1) == kRows * 8 * sizeof(BlockQ5_1));
static_assert(packed_tile_bytes(GgmlType::IQ4_NL) == kRows * 8 * sizeof(BlockIQ4_NL));
static_assert(packed_tile_bytes(GgmlType::Q8_0) == kRows * 8 * sizeof(BlockQ8_0));

// One super-block of 8 rows (the 32-element-block types: 8 blocks), decoded: fp16 scales as
// stored, sub-block fields, and each element's quant (Q2_K: 2 bits; Q3_K: 3 bits; Q4_K: 4 bits;
// Q5_K: 5 bits; Q6_K: 6 bits; IQ4_XS / IQ4_NL: the 4-bit level index; Q4_0 / Q4_1: the nibble;
// Q5_0 / Q5_1: 5 bits; Q8_0: the byte).
struct TileValues {
  uint16_t d[kRows], dmin[kRows];
  // The 32-element-block types: block j's d (and m) of row l.
  uint16_t block_d[8][kRows], block_m[8][kRows];
  // Q4_K / Q5_K: sc[0..7], min[0..7]; Q6_K: the 16 int8 scales; IQ4_XS: ls[0..7]; Q3_K: the 16
  // six-bit scales; Q2_K: the 16 scale bytes.
  uint8_t field[kRows][16];
  uint8_t q[8][8][32];  // [block j][register c][4l + e]: element 4c + e of block j of row l
};

// Row l's quants [block][element] to / from the tile's register order (4 bytes per register).
void scatter_row(const uint8_t (&u)[8][32], int l, TileValues& v) {
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 8; ++c) std::memcpy(&v.q[j][c][4 * l], &u[j][4 * c], 4);
}
void gather_row(const TileValues& v, int l, uint8_t (&u)[8][32]) {
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 8; ++c) std::memcpy(&u[j][4 * c], &v.q[j][c][4 * l], 4);
}

// ---- GGML blocks <-> values ----

// The nibble order of a 32-element block of IQ4_XS and Q4_0: element i < 16 is the low nibble of
// qs[i], element 16 + i its high nibble.
void split_nibbles(const uint8_t* qs, uint8_t (&u)[32]) {
  for (int i = 0; i < 16; ++i) u[i] = qs[i] & 15, u[16 + i] = qs[i] >> 4;
}
void join_nibbles(const uint8_t (&u)[32], uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>((u[i] & 15) | (u[16 + i] & 15) << 4);
}

// Q4_K and Q5_K share the header (d, dmin, 12 bytes of 6-bit scales and mins) and the nibble
// order of qs (blocks 2p and 2p + 1 in the low and high nibbles of qs[32p..]); Q5_K's fifth bits
// are in qh (bit j of qh[i]: element i of block j). `qh` is null for Q4_K.
template <class Block>
void kquant_from_block(const Block& b, const uint8_t* qh, int l, TileValues& v) {
  v.d[l] = b.d, v.dmin[l] = b.dmin;
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    q4k_scale_min(j, b.scales, sc, mn);
    v.field[l][j] = static_cast<uint8_t>(sc), v.field[l][8 + j] = static_cast<uint8_t>(mn);
  }
  uint8_t u[8][32];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i)
      u[j][i] = static_cast<uint8_t>(((b.qs[32 * (j / 2) + i] >> (4 * (j % 2))) & 15) | (qh ? ((qh[i] >> j) & 1) << 4 : 0));
  scatter_row(u, l, v);
}

template <class Block>
void kquant_to_block(const TileValues& v, int l, Block& b, uint8_t* qh) {
  b.d = v.d[l], b.dmin = v.dmin[l];
  const uint8_t* sc = v.field[l];
  const uint8_t* mn = v.field[l] + 8;
  // The inverse of q4k_scale_min (every bit of the 12 bytes is one field's).
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  std::memset(b.qs, 0, sizeof b.qs);
  if (qh) std::memset(qh, 0, 32);
  uint8_t u[8][32];
  gather_row(v, l, u);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i) {
      b.qs[32 * (j / 2) + i] = static_cast<uint8_t>(b.qs[32 * (j / 2) + i] | ((u[j][i] & 15) << (4 * (j % 2))));
      if (qh) qh[i] = static_cast<uint8_t>(qh[i] | ((u[j][i] >> 4) << j));
    }
}

// Q6_K (quants.h): element 128h + 32q + i is bits (q / 2) * 4.. of ql[64h + 32(q % 2) + i] with
// bits 2q.. of qh[32h + i] on top.
void q6k_from_block(const BlockQ6_K& b, int l, TileValues& v) {
  v.d[l] = b.d, v.dmin[l] = 0;
  for (int s = 0; s < 16; ++s) v.field[l][s] = static_cast<uint8_t>(b.scales[s]);
  uint8_t u[8][32];  // element 128h + 32q + i is u[4h + q][i]
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q) {
      const uint8_t* ql = b.ql + 64 * h + 32 * (q % 2);
      const uint8_t* qh = b.qh + 32 * h;
      for (int i = 0; i < 32; ++i)
        u[4 * h + q][i] = static_cast<uint8_t>(((ql[i] >> (4 * (q / 2))) & 15) | ((qh[i] >> (2 * q)) & 3) << 4);
    }
  scatter_row(u, l, v);
}

void q6k_to_block(const TileValues& v, int l, BlockQ6_K& b) {
  b.d = v.d[l];
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(v.field[l][s]);
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  uint8_t u[8][32];
  gather_row(v, l, u);
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 32; ++i) {
        const int e = 128 * h + 32 * q + i;
        uint8_t& ql = b.ql[64 * h + 32 * (q % 2) + i];
        ql = static_cast<uint8_t>(ql | (u[e / 32][e % 32] & 15) << (4 * (q / 2)));
        b.qh[32 * h + i] = static_cast<uint8_t>(b.qh[32 * h + i] | (u[e / 32][e % 32] >> 4) << (2 * q));
      }
}

void iq4xs_from_block(const BlockIQ4_XS& b, int l, TileValues& v) {
  v.d[l] = b.d, v.dmin[l] = 0;
  for (int j = 0; j < 8; ++j) v.field[l][j] = static_cast<uint8_t>(iq4xs_scale(j, b));
  uint8_t u[8][32];
  for (int j = 0; j < 8; ++j) split_nibbles(b.qs + 16 * j, u[j]);
  scatter_row(u, l, v);
}

void iq4xs_to_block(const TileValues& v, int l, BlockIQ4_XS& b) {
  b.d = v.d[l];
  b.scales_h = 0;
  for (int j = 0; j < 8; ++j) b.scales_h = static_cast<uint16_t>(b.scales_h | ((v.field[l][j] >> 4) << (2 * j)));
  for (int j = 0; j < 4; ++j) b.scales_l[j] = static_cast<uint8_t>((v.field[l][2 * j] & 15) | ((v.field[l][2 * j + 1] & 15) << 4));
  uint8_t u[8][32];  // join_nibbles writes every byte of qs
  gather_row(v, l, u);
  for (int j = 0; j < 8; ++j) join_nibbles(u[j], b.qs + 16 * j);
}

// Q2_K and Q3_K share the low-2-bit order of qs: element i of block j is bits 2(j % 4).. of
// qs[32(j / 4) + i]; Q3_K's third bit is bit j of hmask[i]. `hmask` is null for Q2_K.
void low2_from_qs(const uint8_t* qs, const uint8_t* hmask, uint8_t (&u)[8][32]) {
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i)
      u[j][i] = static_cast<uint8_t>(((qs[32 * (j / 4) + i] >> (2 * (j % 4))) & 3) | (hmask ? ((hmask[i] >> j) & 1) << 2 : 0));
}
void low2_to_qs(const uint8_t (&u)[8][32], uint8_t* qs, uint8_t* hmask) {
  std::memset(qs, 0, 64);
  if (hmask) std::memset(hmask, 0, 32);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 32; ++i) {
      qs[32 * (j / 4) + i] = static_cast<uint8_t>(qs[32 * (j / 4) + i] | (u[j][i] & 3) << (2 * (j % 4)));
      if (hmask) hmask[i] = static_cast<uint8_t>(hmask[i] | ((u[j][i] >> 2) & 1) << j);
    }
}

// Q2_K: the 16 scale bytes (4-bit scale, 4-bit min) as they are.
void q2k_from_block(const BlockQ2_K& b, int l, TileValues& v) {
  v.d[l] = b.d, v.dmin[l] = b.dmin;
  std::memcpy(v.field[l], b.scales, 16);
  uint8_t u[8][32];
  low2_from_qs(b.qs, nullptr, u);
  scatter_row(u, l, v);
}

void q2k_to_block(const TileValues& v, int l, BlockQ2_K& b) {
  b.d = v.d[l], b.dmin = v.dmin[l];
  std::memcpy(b.scales, v.field[l], 16);
  uint8_t u[8][32];
  gather_row(v, l, u);
  low2_to_qs(u, b.qs, nullptr);
}

// Q3_K: the 16 six-bit scales unpacked (q3k_scale).
void q3k_from_block(const BlockQ3_K& b, int l, TileValues& v) {
  v.d[l] = b.d, v.dmin[l] = 0;
  for (int s = 0; s < 16; ++s) v.field[l][s] = static_cast<uint8_t>(q3k_scale(s, b.scales));
  uint8_t u[8][32];
  low2_from_qs(b.qs, b.hmask, u);
  scatter_row(u, l, v);
}

void q3k_to_block(const TileValues& v, int l, BlockQ3_K& b) {
  b.d = v.d[l];
  std::memset(b.scales, 0, sizeof b.scales);
  for (int s = 0; s < 16; ++s) {  // the inverse of q3k_scale
    const int f = v.field[l][s];
    b.scales[s % 8] = static_cast<uint8_t>(b.scales[s % 8] | (f & 15) << (s < 8 ? 0 : 4));
    b.scales[8 + s % 4] = static_cast<uint8_t>(b.scales[8 + s % 4] | (f >> 4) << (2 * (s / 4)));
  }
  uint8_t u[8][32];
  gather_row(v, l, u);
  low2_to_qs(u, b.qs, b.hmask);
}

// The 32-element-block types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_0): the 8 blocks of one
// super-block's span of row l. d (and m) as stored; the quants in element order, Q5_0 / Q5_1's
// fifth bit (bit i of the little-endian qh: element i) on top of the nibble.
// Byte x's bits spread to bit 4 of 8 bytes (bit i -> byte i of a little-endian word, as GGUF and
// the x86 hosts this layout serves are): Q5_0 / Q5_1's fifth bits, 8 at a time (one per element,
// they made packing those types the slowest: 0.30 -> 0.54-0.70 GB/s).
constexpr auto kFifthBits = [] {
  std::array<uint64_t, 256> t{};
  for (int x = 0; x < 256; ++x)
    for (int i = 0; i < 8; ++i)
      if ((x >> i) & 1) t[x] |= uint64_t{0x10} << (8 * i);
  return t;
}();

template <class Block>
void small_block_from(const Block& b, int j, int l, TileValues& v, uint8_t (&u)[32]) {
  v.block_d[j][l] = b.d;
  if constexpr (requires { b.m; }) v.block_m[j][l] = b.m;
  if constexpr (sizeof(b.qs) == 32) {
    std::memcpy(u, b.qs, 32);
  } else {
    split_nibbles(b.qs, u);
    if constexpr (requires { b.qh; })
      for (int g = 0; g < 4; ++g) {
        uint64_t w;
        std::memcpy(&w, u + 8 * g, 8);
        w |= kFifthBits[b.qh[g]];
        std::memcpy(u + 8 * g, &w, 8);
      }
  }
}

template <class Block>
void small_block_to(const TileValues& v, int j, int l, const uint8_t (&u)[32], Block& b) {
  b.d = v.block_d[j][l];
  if constexpr (requires { b.m; }) b.m = v.block_m[j][l];
  if constexpr (sizeof(b.qs) == 32) {
    std::memcpy(b.qs, u, 32);
  } else {
    join_nibbles(u, b.qs);
    if constexpr (requires { b.qh; }) {
      std::memset(b.qh, 0, 4);
      for (int i = 0; i < 32; ++i) b.qh[i / 8] = static_cast<uint8_t>(b.qh[i / 8] | ((u[i] >> 4) & 1) << (i % 8));
    }
  }
}

template <class Block>
void small_blocks_from(const uint8_t* row, int l, TileValues& v) {
  uint8_t u[8][32];
  for (int j = 0; j < 8; ++j) small_block_from(reinterpret_cast<const Block*>(row)[j], j, l, v, u[j]);
  scatter_row(u, l, v);
}

template <class Block>
void small_blocks_to(const TileValues& v, int l, uint8_t* row) {
  uint8_t u[8][32];
  gather_row(v, l, u);
  for (int j = 0; j < 8; ++j) small_block_to(v, j, l, u[j], reinterpret_cast<Block*>(row)[j]);
}

// ---- values <-> tile ----

// Byte b of the kernels' transposed field registers t[m] (see transpose_fields in
// matmul_packed_avx2.cpp): 128-bit lane b / 16 holds rows 4 (b / 16) .. + 3, dword (b % 16) / 4
// field 4m + (b % 16) / 4, byte b % 4 the row within the lane.
int t_row(int b) { return 4 * (b / 16) + b % 4; }
int t_field(int m, int b) { return 4 * m + (b % 16) / 4; }

// Moves the tile's fields between `v` and the tile bytes; `to_tile` picks the direction. The
// bit-field encodings are spelled once, as (value, tile byte, shift, width) moves.
void move_bits(uint8_t& value, int value_shift, uint8_t& tile_byte, int tile_shift, int width, bool to_tile) {
  const int mask = (1 << width) - 1;
  if (to_tile) {
    tile_byte = static_cast<uint8_t>((tile_byte & ~(mask << tile_shift)) | (((value >> value_shift) & mask) << tile_shift));
  } else {
    value = static_cast<uint8_t>((value & ~(mask << value_shift)) | (((tile_byte >> tile_shift) & mask) << value_shift));
  }
}

void move_halves(uint16_t (&h)[kRows], uint8_t* tile, bool to_tile) {
  if (to_tile) std::memcpy(tile, h, sizeof h);
  else std::memcpy(h, tile, sizeof h);
}

// Q4_K / Q5_K tile header: [0, 16) d, [16, 32) dmin (row order); [32, 128) the fields as P0,
// P1, P2 with
//   P0 = t0 | (t2 & 3) << 6, P1 = t1 | (t3 & 3) << 6, P2 = t2 >> 2 | (t3 >> 2) << 4
// (t0, t1: the 8 scales, t2, t3: the 8 mins, in the t layout).
void kquant_move_header(TileValues& v, uint8_t* tile, bool to_tile) {
  move_halves(v.d, tile, to_tile);
  move_halves(v.dmin, tile + 16, to_tile);
  uint8_t* p = tile + 32;
  for (int b = 0; b < 32; ++b) {
    const int l = t_row(b);
    for (int half = 0; half < 2; ++half) {
      uint8_t& sc = v.field[l][t_field(half, b)];
      uint8_t& mn = v.field[l][t_field(2 + half, b)];
      move_bits(sc, 0, p[32 * half + b], 0, 6, to_tile);
      move_bits(mn, 0, p[32 * half + b], 6, 2, to_tile);
      move_bits(mn, 2, p[64 + b], 4 * half, 4, to_tile);
    }
  }
}

// Block j's quants in a tile of type t (weight_pack.h's geometry).
uint8_t* block_quants(GgmlType t, uint8_t* tile, int j) { return tile + packed_head_bytes(t) + packed_block_bytes(t) * j; }

// The low 4 bits of the quants, at the start of each block's quants: 4 registers c of 32
// bytes whose low nibbles are register c's and high nibbles register 4 + c's. From the tile it
// sets each quant to those 4 bits (Q6_K's top two are moved in after).
void move_nibble_registers(GgmlType t, TileValues& v, uint8_t* tile, bool to_tile) {
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 4; ++c) {
      uint8_t* reg = block_quants(t, tile, j) + 32 * c;
      uint8_t* lo = v.q[j][c];
      uint8_t* hi = v.q[j][4 + c];
      // The direction outside the byte loop, which the compiler can then vectorize.
      if (to_tile)
        for (int b = 0; b < 32; ++b) reg[b] = static_cast<uint8_t>((lo[b] & 15) | (hi[b] & 15) << 4);
      else
        for (int b = 0; b < 32; ++b) lo[b] = reg[b] & 15, hi[b] = reg[b] >> 4;
    }
}

// Q4_K tile (8 x 144 = 1152 bytes): the header, then [128, 1152) the nibble registers.
void q4k_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  kquant_move_header(v, tile, to_tile);
  move_nibble_registers(GgmlType::Q4_K, v, tile, to_tile);
}

// Bits value_shift, value_shift + 1 of the quants of block j's registers c (plane 0) and 4 + c
// (plane 1, 32 bytes after plane 0), c < 4: byte b of a plane holds register c's byte b in bits
// 2c, 2c + 1. From the tile only those two bits of each quant are set.
void move_two_bit_planes(TileValues& v, int j, int value_shift, uint8_t* planes, bool to_tile) {
  for (int half = 0; half < 2; ++half) {
    uint8_t* plane = planes + 32 * half;
    if (to_tile) {  // the direction outside the byte loops, which the compiler can then vectorize
      for (int b = 0; b < 32; ++b) {
        int byte = 0;
        for (int c = 0; c < 4; ++c) byte |= ((v.q[j][4 * half + c][b] >> value_shift) & 3) << (2 * c);
        plane[b] = static_cast<uint8_t>(byte);
      }
    } else {
      for (int c = 0; c < 4; ++c)
        for (int b = 0; b < 32; ++b) {
          uint8_t& q = v.q[j][4 * half + c][b];
          q = static_cast<uint8_t>((q & ~(3 << value_shift)) | ((plane[b] >> (2 * c)) & 3) << value_shift);
        }
    }
  }
}

// Q6_K tile (8 x 210 = 1680 bytes): [0, 16) d (row order); [16, 144) the int8 scales, sub-block
// s's 8 rows at 16 + 8s; [144, 1680) per block j 192 bytes: the nibble registers (128 bytes),
// then H0 and H1 (32 bytes each) whose byte b has in bits 2c..2c+1 the top two bits of byte b of
// register c (H0) or of register 4 + c (H1).
void q6k_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  move_halves(v.d, tile, to_tile);
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < kRows; ++l) move_bits(v.field[l][s], 0, tile[16 + 8 * s + l], 0, 8, to_tile);
  move_nibble_registers(GgmlType::Q6_K, v, tile, to_tile);
  for (int j = 0; j < 8; ++j) move_two_bit_planes(v, j, 4, block_quants(GgmlType::Q6_K, tile, j) + 128, to_tile);
}

// The 5-bit quants of each block: registers V0..V3 and V4 holding the
// quants u_c of the 8 registers c = 0..7 (register c: elements 4c..4c+3 of each row, row l in
// bytes 4l..4l+3) as
//   V_i = u_i | (u_{4+i} >> 2) << 5 (i < 4),   V4 = sum_i (u_{4+i} & 3) << 2i.
void move_five_bit_registers(GgmlType t, TileValues& v, uint8_t* tile, bool to_tile) {
  for (int j = 0; j < 8; ++j) {
    uint8_t* blk = block_quants(t, tile, j);
    for (int i = 0; i < 4; ++i) {
      uint8_t *lo = v.q[j][i], *hi = v.q[j][4 + i], *reg = blk + 32 * i, *v4 = blk + 128;
      if (to_tile) {  // the direction outside the byte loops, which the compiler can then vectorize
        for (int b = 0; b < 32; ++b) {
          reg[b] = static_cast<uint8_t>(lo[b] | (hi[b] >> 2) << 5);
          v4[b] = static_cast<uint8_t>(v4[b] | (hi[b] & 3) << (2 * i));
        }
      } else {
        for (int b = 0; b < 32; ++b) {
          lo[b] = reg[b] & 31;
          hi[b] = static_cast<uint8_t>((reg[b] >> 5) << 2 | ((v4[b] >> (2 * i)) & 3));
        }
      }
    }
  }
}

// Q5_K tile (8 x 176 = 1408 bytes): the header, then [128, 1408) per block j 160 bytes of 5-bit
// registers.
void q5k_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  kquant_move_header(v, tile, to_tile);
  move_five_bit_registers(GgmlType::Q5_K, v, tile, to_tile);
}

// IQ4_XS tile: [0, 16) d; [16, 64) the 8 scales ls as Q0 = t0 | (t1 & 3) << 6 (32 bytes) and
// Q1 (16 bytes) = t1[b] >> 2 | (t1[b + 16] >> 2) << 4; [64, 1088) per block j 128 bytes: 4
// registers c of 32 bytes, row l's qs[16j + 4c .. 16j + 4c + 3] in bytes 4l..4l+3 (low nibbles:
// elements 4c..; high nibbles: 16 + 4c..), as move_nibble_registers.
void iq4xs_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  move_halves(v.d, tile, to_tile);
  uint8_t* p = tile + 16;
  for (int b = 0; b < 32; ++b) {
    const int l = t_row(b);
    move_bits(v.field[l][t_field(0, b)], 0, p[b], 0, 6, to_tile);
    move_bits(v.field[l][t_field(1, b)], 0, p[b], 6, 2, to_tile);
    move_bits(v.field[l][t_field(1, b)], 2, p[32 + b % 16], 4 * (b / 16), 4, to_tile);
  }
  move_nibble_registers(GgmlType::IQ4_XS, v, tile, to_tile);
}

// Tile of the 32-element-block types (8 blocks of 8 rows): [0, 128) per block j 16 bytes, the 8
// rows' fp16 d in row order; for Q4_1 / Q5_1 [128, 256) their fp16 m the same way; then per
// block the quants: Q4_0 / Q4_1 / IQ4_NL as nibble registers (128 bytes), Q5_0 / Q5_1 as 5-bit
// registers (160 bytes), Q8_0 as 8 registers of the int8 quants (256 bytes; row l's qs[4c ..
// 4c + 3] in bytes 4l..4l+3 of register c). Sizes: 8 x 8 x the block's (18, 20, 22, 24, 18, 34).
void small_block_move_tile(GgmlType t, TileValues& v, uint8_t* tile, bool to_tile) {
  const bool affine = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  for (int j = 0; j < 8; ++j) {
    move_halves(v.block_d[j], tile + 16 * j, to_tile);
    if (affine) move_halves(v.block_m[j], tile + 128 + 16 * j, to_tile);
  }
  if (t == GgmlType::Q5_0 || t == GgmlType::Q5_1) {
    move_five_bit_registers(t, v, tile, to_tile);
  } else if (t == GgmlType::Q8_0) {
    for (int j = 0; j < 8; ++j) {
      if (to_tile) std::memcpy(block_quants(t, tile, j), v.q[j], 256);
      else std::memcpy(v.q[j], block_quants(t, tile, j), 256);
    }
  } else {
    move_nibble_registers(t, v, tile, to_tile);
  }
}

// The 16 sub-block fields of the 8 rows as a 128-byte array F[8s + l] (sub-block s of row l),
// stored 6 bits each in 96 bytes: [0, 64) byte m holds F[m] & 15 in its low nibble and
// F[64 + m] & 15 in its high one; [64, 96) byte m holds F[32t + m] >> 4 in bits 2t..2t+1.
void move_six_bit_fields(TileValues& v, uint8_t* p, bool to_tile) {
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < kRows; ++l) {
      const int f = 8 * s + l;
      move_bits(v.field[l][s], 0, p[f % 64], 4 * (f / 64), 4, to_tile);
      move_bits(v.field[l][s], 4, p[64 + f % 32], 2 * (f / 32), 2, to_tile);
    }
}

// Q3_K tile (8 x 110 = 880 bytes): [0, 16) d (row order); [16, 112) the 6-bit scales as
// move_six_bit_fields; [112, 880) per block j 96 bytes: registers R0, R1, R2 of 32 bytes with
//   R_c = u_c | (bit c of u_3) << 3 | u_{4+c} << 4 | (bit c of u_7) << 7   (c < 3)
// (u_c: the 3-bit quants of register c), so that registers c and 4 + c are R_c's nibbles
// (masked to 3 bits) and registers 3 and 7 gather from the spare bits 3 and 7.
void q3k_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  move_halves(v.d, tile, to_tile);
  move_six_bit_fields(v, tile + 16, to_tile);
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 3; ++c) {
      uint8_t* reg = block_quants(GgmlType::Q3_K, tile, j) + 32 * c;
      uint8_t *lo = v.q[j][c], *hi = v.q[j][4 + c], *third = v.q[j][3], *seventh = v.q[j][7];
      if (to_tile) {  // the direction outside the byte loops, which the compiler can then vectorize
        for (int b = 0; b < 32; ++b)
          reg[b] = static_cast<uint8_t>((lo[b] & 7) | ((third[b] >> c) & 1) << 3 | (hi[b] & 7) << 4 | ((seventh[b] >> c) & 1) << 7);
      } else {
        for (int b = 0; b < 32; ++b) {
          lo[b] = reg[b] & 7, hi[b] = (reg[b] >> 4) & 7;
          third[b] = static_cast<uint8_t>((c ? third[b] : 0) | ((reg[b] >> 3) & 1) << c);
          seventh[b] = static_cast<uint8_t>((c ? seventh[b] : 0) | ((reg[b] >> 7) & 1) << c);
        }
      }
    }
}

// Q2_K tile (8 x 84 = 672 bytes): [0, 16) d, [16, 32) dmin (row order); [32, 160) the scale
// bytes, sub-block s's 8 rows at 32 + 8s; [160, 672) per block j 64 bytes: registers L0 and L1
// whose byte b holds the 2-bit quants of byte b of register c (L0) or 4 + c (L1) in bits 2c..
void q2k_move_tile(TileValues& v, uint8_t* tile, bool to_tile) {
  move_halves(v.d, tile, to_tile);
  move_halves(v.dmin, tile + 16, to_tile);
  for (int s = 0; s < 16; ++s)
    for (int l = 0; l < kRows; ++l) move_bits(v.field[l][s], 0, tile[32 + 8 * s + l], 0, 8, to_tile);
  for (int j = 0; j < 8; ++j) move_two_bit_planes(v, j, 0, block_quants(GgmlType::Q2_K, tile, j), to_tile);
}

// Moves every tile of a rows x cols matrix between `ggml` and `packed`, and copies the rows past
// the last full group as they are.
void move_matrix(GgmlType t, int64_t rows, int64_t cols, uint8_t* ggml, uint8_t* packed, bool to_tile, ThreadPool* pool) {
  const size_t row_bytes = ggml_row_size(t, cols);
  const size_t super_bytes = ggml_row_size(t, kSuper);  // one super-block's span of a row
  const size_t tile_bytes = packed_tile_bytes(t);       // = kRows * super_bytes (static_asserts above)
  const int64_t supers = cols / kSuper, groups = rows / kRows;
  auto from_blocks = [t](const uint8_t* b, int l, TileValues& v) {
    switch (t) {
      case GgmlType::Q4_0: return small_blocks_from<BlockQ4_0>(b, l, v);
      case GgmlType::Q4_1: return small_blocks_from<BlockQ4_1>(b, l, v);
      case GgmlType::Q5_0: return small_blocks_from<BlockQ5_0>(b, l, v);
      case GgmlType::Q5_1: return small_blocks_from<BlockQ5_1>(b, l, v);
      case GgmlType::IQ4_NL: return small_blocks_from<BlockIQ4_NL>(b, l, v);
      case GgmlType::Q8_0: return small_blocks_from<BlockQ8_0>(b, l, v);
      case GgmlType::Q2_K: return q2k_from_block(*reinterpret_cast<const BlockQ2_K*>(b), l, v);
      case GgmlType::Q3_K: return q3k_from_block(*reinterpret_cast<const BlockQ3_K*>(b), l, v);
      case GgmlType::Q4_K: return kquant_from_block(*reinterpret_cast<const BlockQ4_K*>(b), nullptr, l, v);
      case GgmlType::Q5_K: return kquant_from_block(*reinterpret_cast<const BlockQ5_K*>(b), reinterpret_cast<const BlockQ5_K*>(b)->qh, l, v);
      case GgmlType::Q6_K: return q6k_from_block(*reinterpret_cast<const BlockQ6_K*>(b), l, v);
      default: return iq4xs_from_block(*reinterpret_cast<const BlockIQ4_XS*>(b), l, v);
    }
  };
  auto to_blocks = [t](const TileValues& v, int l, uint8_t* b) {
    switch (t) {
      case GgmlType::Q4_0: return small_blocks_to<BlockQ4_0>(v, l, b);
      case GgmlType::Q4_1: return small_blocks_to<BlockQ4_1>(v, l, b);
      case GgmlType::Q5_0: return small_blocks_to<BlockQ5_0>(v, l, b);
      case GgmlType::Q5_1: return small_blocks_to<BlockQ5_1>(v, l, b);
      case GgmlType::IQ4_NL: return small_blocks_to<BlockIQ4_NL>(v, l, b);
      case GgmlType::Q8_0: return small_blocks_to<BlockQ8_0>(v, l, b);
      case GgmlType::Q2_K: return q2k_to_block(v, l, *reinterpret_cast<BlockQ2_K*>(b));
      case GgmlType::Q3_K: return q3k_to_block(v, l, *reinterpret_cast<BlockQ3_K*>(b));
      case GgmlType::Q4_K: return kquant_to_block(v, l, *reinterpret_cast<BlockQ4_K*>(b), nullptr);
      case GgmlType::Q5_K: return kquant_to_block(v, l, *reinterpret_cast<BlockQ5_K*>(b), reinterpret_cast<BlockQ5_K*>(b)->qh);
      case GgmlType::Q6_K: return q6k_to_block(v, l, *reinterpret_cast<BlockQ6_K*>(b));
      default: return iq4xs_to_block(v, l, *reinterpret_cast<BlockIQ4_XS*>(b));
    }
  };
  auto move_tile = [t](TileValues& v, uint8_t* tile, bool to) {
    switch (t) {
      case GgmlType::Q2_K: return q2k_move_tile(v, tile, to);
      case GgmlType::Q3_K: return q3k_move_tile(v, tile, to);
      case GgmlType::Q4_K: return q4k_move_tile(v, tile, to);
      case GgmlType::Q5_K: return q5k_move_tile(v, tile, to);
      case GgmlType::Q6_K: return q6k_move_tile(v, tile, to);
      case GgmlType::IQ4_XS: return iq4xs_move_tile(v, tile, to);
      default: return small_block_move_tile(t, v, tile, to);
    }
  };
  auto move_groups = [&](int64_t g_begin, int64_t g_end, int) {
    TileValues v{};
    for (int64_t g = g_begin; g < g_end; ++g)
      for (int64_t s = 0; s < supers; ++s) {
        uint8_t* tile = packed + static_cast<size_t>(g * kRows) * row_bytes + s * tile_bytes;
        uint8_t* blk[kRows];
        for (int l = 0; l < kRows; ++l) blk[l] = ggml + static_cast<size_t>(g * kRows + l) * row_bytes + s * super_bytes;
        if (to_tile) {
          for (int l = 0; l < kRows; ++l) from_blocks(blk[l], l, v);
          std::memset(tile, 0, tile_bytes);
        }
        move_tile(v, tile, to_tile);
        if (!to_tile)
          for (int l = 0; l < kRows; ++l) to_blocks(v, l, blk[l]);
      }
  };
  if (pool != nullptr) pool->parallel_for(groups, move_groups);
  else move_groups(0, groups, 0);
  const size_t done = static_cast<size_t>(groups * kRows) * row_bytes, all = static_cast<size_t>(rows) * row_bytes;
  if (to_tile) std::memcpy(packed + done, ggml + done, all - done);
  else std::memcpy(ggml + done, packed + done, all - done);
}

}  // namespace

bool decode_pack_supported(GgmlType t, int64_t rows, int64_t cols, DecodeLayout l) {
  if (l == DecodeLayout::Rows16)
    return rows16_type(t) && rows >= static_cast<int64_t>(kRows16Rows) && cols > 0 &&
           cols % (32 * rows16_unit_blocks(t)) == 0;
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::IQ4_NL:
    case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::IQ4_XS: return rows >= kRows && cols > 0 && cols % kSuper == 0;
    default: return false;
  }
}

std::optional<DecodeLayout> decode_layout_for(CpuIsa isa, GgmlType t, int64_t rows, int64_t cols) {
  for (DecodeLayout l : {DecodeLayout::Tiles8, DecodeLayout::Rows16})
    if (decode_layout_isa(l) == vector_isa(isa) && decode_pack_supported(t, rows, cols, l)) return l;
  return std::nullopt;
}

PackedWeight pack_for_decode(GgmlType t, const void* w, int64_t rows, int64_t cols, ThreadPool* pool, DecodeLayout l) {
  if (!decode_pack_supported(t, rows, cols, l))
    throw std::invalid_argument(std::string("pack_for_decode: no ") + (l == DecodeLayout::Rows16 ? "Rows16" : "Tiles8") +
                                " layout for " + ggml_type_info(t).name + " " + std::to_string(rows) + " x " +
                                std::to_string(cols));
  PackedWeight p;
  p.layout = l, p.type = t, p.rows = rows, p.cols = cols, p.source = w;
  p.size = ggml_row_size(t, cols) * static_cast<size_t>(rows);
  p.bytes.reset(static_cast<uint8_t*>(::operator new[](p.size, std::align_val_t(64))));
  // The movers only read `ggml` when packing; the cast lets one routine serve both directions.
  uint8_t* ggml = static_cast<uint8_t*>(const_cast<void*>(w));
  if (l == DecodeLayout::Rows16) detail::move_matrix_rows16(t, rows, cols, ggml, p.bytes.get(), true, pool);
  else move_matrix(t, rows, cols, ggml, p.bytes.get(), true, pool);
  return p;
}

void unpack_from_decode(const PackedWeight& p, void* out) {
  uint8_t* ggml = static_cast<uint8_t*>(out);
  if (p.layout == DecodeLayout::Rows16) detail::move_matrix_rows16(p.type, p.rows, p.cols, ggml, p.bytes.get(), false, nullptr);
  else move_matrix(p.type, p.rows, p.cols, ggml, p.bytes.get(), false, nullptr);
}

}  // namespace pagoda::cpu
