// The Rows16 decode layout (weight_pack.h) of Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K and IQ4_XS matrices:
// packing and its exact inverse. Portable code (no ISA flags): it runs once per matrix at load, at memory speed.
//
// Each type's mover handles one row's share of one unit in both directions (`to_packed`), moving
// the same bits, so that one routine is both the packing and its inverse.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"

namespace pagoda::cpu::detail {

namespace {

static_assert(rows16_unit_bytes(GgmlType::Q8_0) == kRows16Rows * 2 * sizeof(BlockQ8_0) &&
                  rows16_unit_bytes(GgmlType::Q4_0) == kRows16Rows * 2 * sizeof(BlockQ4_0) &&
                  rows16_unit_bytes(GgmlType::IQ4_NL) == kRows16Rows * 2 * sizeof(BlockIQ4_NL) &&
                  rows16_unit_bytes(GgmlType::IQ4_XS) == kRows16Rows * sizeof(BlockIQ4_XS) &&
                  rows16_unit_bytes(GgmlType::Q4_K) == kRows16Rows * sizeof(BlockQ4_K) &&
                  rows16_unit_bytes(GgmlType::Q6_K) == kRows16Rows * sizeof(BlockQ6_K),
              "a unit holds exactly 16 rows' GGML bytes of its blocks");
static_assert(kRows16Q6KDOffset + 2 * kRows16Rows == rows16_unit_bytes(GgmlType::Q6_K) &&
                  kRows16Q4KHeadOffset + 4 * kRows16Rows + 3 * 64 == rows16_unit_bytes(GgmlType::Q4_K) &&
                  kRows16Q4ScaleOffset + 4 * kRows16Rows == rows16_unit_bytes(GgmlType::Q4_0) &&
                  kRows16IQ4XSHeadOffset + 2 * kRows16Rows + 64 + 32 == rows16_unit_bytes(GgmlType::IQ4_XS),
              "every byte of a unit has one owner");

// n bytes between `ggml` and `packed`, the way to_packed says.
inline void move(bool to_packed, uint8_t* ggml, uint8_t* packed, size_t n) {
  if (to_packed) std::memcpy(packed, ggml, n);
  else std::memcpy(ggml, packed, n);
}

// The `count` dwords at ggml <-> dword l of the `count` registers at regs.
inline void move_register_dwords(bool to_packed, uint8_t* ggml, uint8_t* regs, int l, int count = 8) {
  for (int c = 0; c < count; ++c) move(to_packed, ggml + 4 * c, regs + 64 * c + 4 * l, 4);
}

// Byte i (< 4) of row l's share of a 64-byte vector of per-row values (the Q4_K and IQ4_XS
// scales): where a byte shuffle within 128-bit lanes finds it for dword lane l.
inline size_t value_byte(int l, int i) { return static_cast<size_t>(16 * (l / 4) + 4 * i + l % 4); }

// Q8_0, blocks 2u and 2u + 1 of row l (`ggml` at block 2u): the quants as q + 128.
void move_q8_0(bool to_packed, uint8_t* ggml, uint8_t* unit, int l) {
  for (int h = 0; h < 2; ++h) {
    auto* blk = reinterpret_cast<BlockQ8_0*>(ggml) + h;
    uint8_t* regs = unit + 512 * h;
    for (int c = 0; c < 8; ++c) {
      uint32_t v;
      std::memcpy(&v, to_packed ? static_cast<const void*>(blk->qs + 4 * c) : regs + 64 * c + 4 * l, 4);
      v ^= 0x80808080u;
      std::memcpy(to_packed ? static_cast<void*>(regs + 64 * c + 4 * l) : blk->qs + 4 * c, &v, 4);
    }
    move(to_packed, reinterpret_cast<uint8_t*>(&blk->d), unit + kRows16Q8ScaleOffset + 32 * h + 2 * l, 2);
  }
}

// Q4_K: qs chunk p as the nibble registers of chunk p; the 12 scale bytes as the 16 six-bit
// values of q4k_scale_min spread over P0..P2.
void move_q4_k(bool to_packed, uint8_t* ggml, uint8_t* unit, int l) {
  auto* blk = reinterpret_cast<BlockQ4_K*>(ggml);
  for (int p = 0; p < 4; ++p) move_register_dwords(to_packed, blk->qs + 32 * p, unit + 512 * p, l);
  uint8_t* head = unit + kRows16Q4KHeadOffset;
  move(to_packed, reinterpret_cast<uint8_t*>(&blk->d), head + 2 * l, 2);
  move(to_packed, reinterpret_cast<uint8_t*>(&blk->dmin), head + 32 + 2 * l, 2);
  uint8_t* pk = head + 64;  // P0..P2, 64 bytes each
  int v[16];                // sc0..7, mn0..7
  auto at = [&](int k, int i) -> uint8_t& { return pk[64 * k + value_byte(l, i)]; };
  if (to_packed) {
    for (int j = 0; j < 8; ++j) q4k_scale_min(j, blk->scales, v[j], v[8 + j]);
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 4; ++i) at(k, i) = static_cast<uint8_t>(v[4 * k + i] | ((v[12 + i] >> (2 * k)) & 3) << 6);
    return;
  }
  for (int i = 0; i < 4; ++i) {
    v[12 + i] = 0;
    for (int k = 0; k < 3; ++k) v[4 * k + i] = at(k, i) & 63, v[12 + i] |= (at(k, i) >> 6) << (2 * k);
  }
  // q4k_scale_min's packing: sub-blocks 0-3 whole in the low 6 bits of bytes 0-7, 4-7 as low
  // nibbles in bytes 8-11 and top 2 bits in the top bits of bytes 0-7.
  for (int j = 0; j < 4; ++j) {
    const int sc = v[j], mn = v[8 + j], sc4 = v[4 + j], mn4 = v[12 + j];
    blk->scales[j] = static_cast<uint8_t>(sc | (sc4 >> 4) << 6);
    blk->scales[j + 4] = static_cast<uint8_t>(mn | (mn4 >> 4) << 6);
    blk->scales[j + 8] = static_cast<uint8_t>((sc4 & 15) | (mn4 & 15) << 4);
  }
}

// Q6_K: the 6-bit values v0..v3 of blocks 4h..4h+3 at element e = 4c + i as the bytes A, B, C at
// row l's byte 4l + i of the triple (h, c) (weight_pack.h); scales and d per row position.
void move_q6_k(bool to_packed, uint8_t* ggml, uint8_t* unit, int l) {
  auto* blk = reinterpret_cast<BlockQ6_K*>(ggml);
  for (int h = 0; h < 2; ++h)
    for (int e = 0; e < 32; ++e) {
      uint8_t* abc = unit + kRows16Q6KTripleBytes * (8 * h + e / 4) + 4 * l + e % 4;
      uint8_t &a = abc[0], &b = abc[64], &c = abc[128];
      uint8_t &ql0 = blk->ql[64 * h + e], &ql1 = blk->ql[64 * h + 32 + e], &qh = blk->qh[32 * h + e];
      int v[4];
      if (to_packed) {
        // GGML's Q6_K: block 4h + p's element e has its low 4 bits in the low (p < 2) or high
        // nibble of ql[64h + 32(p % 2) + e] and its top 2 bits at bits 2p of qh[32h + e].
        for (int p = 0; p < 4; ++p) v[p] = ((p & 1 ? ql1 : ql0) >> (4 * (p >> 1)) & 15) | ((qh >> (2 * p)) & 3) << 4;
        a = static_cast<uint8_t>(v[0] | (v[1] >> 4) << 6);
        b = static_cast<uint8_t>((v[1] & 15) | (v[3] >> 2) << 4);
        c = static_cast<uint8_t>((v[3] & 3) | v[2] << 2);
      } else {
        v[0] = a & 63, v[1] = (b & 15) | (a >> 6) << 4, v[2] = c >> 2, v[3] = (c & 3) | (b >> 4) << 2;
        ql0 = static_cast<uint8_t>((v[0] & 15) | (v[2] & 15) << 4);
        ql1 = static_cast<uint8_t>((v[1] & 15) | (v[3] & 15) << 4);
        qh = static_cast<uint8_t>((v[0] >> 4) | (v[1] >> 4) << 2 | (v[2] >> 4) << 4 | (v[3] >> 4) << 6);
      }
    }
  for (int s = 0; s < 16; ++s) move(to_packed, reinterpret_cast<uint8_t*>(blk->scales + s), unit + kRows16Q6KScaleOffset + 16 * s + l, 1);
  move(to_packed, reinterpret_cast<uint8_t*>(&blk->d), unit + kRows16Q6KDOffset + 2 * l, 2);
}

// Q4_0 and IQ4_NL (the same block shape), blocks 2u and 2u + 1 of row l: qs as 4 nibble
// registers per block, d per row position.
void move_q4_0(bool to_packed, uint8_t* ggml, uint8_t* unit, int l) {
  static_assert(sizeof(BlockQ4_0) == sizeof(BlockIQ4_NL) && offsetof(BlockIQ4_NL, qs) == offsetof(BlockQ4_0, qs));
  for (int h = 0; h < 2; ++h) {
    auto* blk = reinterpret_cast<BlockQ4_0*>(ggml) + h;
    move_register_dwords(to_packed, blk->qs, unit + 256 * h, l, 4);
    move(to_packed, reinterpret_cast<uint8_t*>(&blk->d), unit + kRows16Q4ScaleOffset + 32 * h + 2 * l, 2);
  }
}

// IQ4_XS: block j's qs as 4 nibble registers at 256j; the 8 six-bit scales of iq4xs_scale
// spread over P (64 bytes) and N (32 bytes of nibbles).
void move_iq4_xs(bool to_packed, uint8_t* ggml, uint8_t* unit, int l) {
  auto* blk = reinterpret_cast<BlockIQ4_XS*>(ggml);
  for (int j = 0; j < 8; ++j) move_register_dwords(to_packed, blk->qs + 16 * j, unit + 256 * j, l, 4);
  uint8_t* head = unit + kRows16IQ4XSHeadOffset;
  move(to_packed, reinterpret_cast<uint8_t*>(&blk->d), head + 2 * l, 2);
  uint8_t* pv = head + 32;
  uint8_t* nv = pv + 64;
  for (int i = 0; i < 4; ++i) {
    const size_t b = value_byte(l, i);
    uint8_t& nib = nv[b % 32];
    const int shift = b >= 32 ? 4 : 0;
    if (to_packed) {
      const int lo = iq4xs_scale(i, *blk), hi = iq4xs_scale(4 + i, *blk);
      pv[b] = static_cast<uint8_t>(lo | (hi & 3) << 6);
      nib = static_cast<uint8_t>((nib & ~(15 << shift)) | (hi >> 2) << shift);
    } else {
      const int lo = pv[b] & 63, hi = pv[b] >> 6 | ((nib >> shift) & 15) << 2;
      for (int j : {i, 4 + i}) {  // iq4xs_scale's packing: low nibble in scales_l, top 2 bits in scales_h
        const int v = j == i ? lo : hi;
        uint8_t& sl = blk->scales_l[j / 2];
        sl = static_cast<uint8_t>((sl & ~(15 << (4 * (j % 2)))) | (v & 15) << (4 * (j % 2)));
        blk->scales_h = static_cast<uint16_t>((blk->scales_h & ~(3u << (2 * j))) | static_cast<unsigned>(v >> 4) << (2 * j));
      }
    }
  }
}

}  // namespace

void move_matrix_rows16(GgmlType t, int64_t rows, int64_t cols, uint8_t* ggml, uint8_t* packed, bool to_packed,
                        ThreadPool* pool) {
  constexpr int64_t R = static_cast<int64_t>(kRows16Rows);
  const size_t row_bytes = ggml_row_size(t, cols);
  const size_t unit_bytes = rows16_unit_bytes(t), unit_row_bytes = unit_bytes / kRows16Rows;
  const int64_t units = cols / (32 * rows16_unit_blocks(t)), groups = rows / R;
  auto* mover = t == GgmlType::Q8_0                              ? move_q8_0
                 : t == GgmlType::Q4_0 || t == GgmlType::IQ4_NL ? move_q4_0
                 : t == GgmlType::Q4_K                          ? move_q4_k
                 : t == GgmlType::Q6_K                          ? move_q6_k
                                                                : move_iq4_xs;
  auto move_groups = [&](int64_t g_begin, int64_t g_end, int) {
    for (int64_t g = g_begin; g < g_end; ++g) {
      uint8_t* group = packed + static_cast<size_t>(g * R) * row_bytes;
      for (int64_t u = 0; u < units; ++u)
        for (int l = 0; l < static_cast<int>(R); ++l)
          mover(to_packed, ggml + static_cast<size_t>(g * R + l) * row_bytes + static_cast<size_t>(u) * unit_row_bytes,
                group + static_cast<size_t>(u) * unit_bytes, l);
    }
  };
  if (pool != nullptr) pool->parallel_for(groups, move_groups);
  else move_groups(0, groups, 0);
  const size_t done = static_cast<size_t>(groups * R) * row_bytes, all = static_cast<size_t>(rows) * row_bytes;
  move(to_packed, ggml + done, packed + done, all - done);
}

}  // namespace pagoda::cpu::detail
