// AVX2 kernels for the decode layout (weight_pack.h: tiles of 8 rows whose registers hold 4
// consecutive elements of each row, one row per int32 lane) and the unpacking of its tiles that
// the prefill tile of matmul_avx2.cpp reads (unpack_packed_tile_avx2). Same exact integers and
// float epilogue as the GGML-layout kernels of matmul_rows_avx2.h, which also take the rows past
// the last full tile.
#include "kernels/cpu/matmul_rows_avx2.h"

namespace pagoda::cpu::detail {

namespace {

// ---- The decode layout (weight_pack.h) -----------------------------------------------------
// A 32-byte load of a tile holds 4 consecutive elements of each of the 8 rows, one row per
// int32 lane, so vpmaddubsw + vpmaddwd against the 4 activation bytes broadcast to every lane
// leave row l's partial sum in lane l: a block's 8 row sums build up in one register with no
// cross-lane reduction, and the fifth bits / level lookups are done for 8 rows at once. Same
// exact integers, same float epilogue (block_epilogue) as the GGML-layout kernels.
//
// The activation dword is broadcast straight from the quantized row (one vpbroadcastd with a
// memory operand; the row is k bytes, always in L1). A copy made once per call with every
// dword already broadcast (k * 8 bytes: 45 KiB for k = 5632, more than L1) was a second stream
// beside the weights, from L2: reading from the row instead moved the TinyLlama stack from
// 83 / 88% to 87 / 90% of stream (Q8_0, 1 / 2 threads), IQ4_XS 74 / 89% -> 81 / 95%, Q5_K
// 84 / 89% -> 89 / 101% (bench-kernels-ab.sh, medians of 3 alternating runs on a shared host).
inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// ---- The registers of a packed block -------------------------------------------------------
// One reader per register form of weight_pack.h, made from a block's bytes: reg(c) is register c
// (c = 0..7: elements 4c..4c+3 of each of the 8 rows), u bytes for the unsigned types and the
// quants q for the signed ones (IQ4, Q8_0). The decode sums below read blocks through these, and
// so does the prefill tile (unpack_packed_tile_avx2). Callers pass c as a constant once
// unrolled, so the shifts are immediates; a register pair c / 4 + c shares its loads.

// Q4_0, Q4_1, Q4_K (and the IQ4 level indices): register c < 4 is the low nibbles of V_c, 4 + c
// its high nibbles.
struct NibbleRegs {
  const uint8_t* blk;
  [[gnu::always_inline]] __m256i reg(int c) const {
    const __m256i v = load32(blk + 32 * (c % 4));
    return _mm256_and_si256(c < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
  }
};

// IQ4_XS, IQ4_NL: the signed levels of NibbleRegs' indices.
struct Iq4Regs {
  NibbleRegs index;
  __m256i levels;
  explicit Iq4Regs(const uint8_t* blk)
      : index{blk},
        levels(_mm256_xor_si256(_mm256_broadcastsi128_si256(unpack_iq4_table()), _mm256_set1_epi8(static_cast<char>(0x80)))) {}
  [[gnu::always_inline]] __m256i reg(int c) const { return _mm256_shuffle_epi8(levels, index.reg(c)); }
};

// Q5_K, Q5_0, Q5_1: register i < 4 is the low 5 bits of V_i; register 4 + i takes its bits 2-4
// from V_i's top 3 and bits 0-1 from V4 (weight_pack.cpp).
struct FiveBitRegs {
  const uint8_t* blk;
  __m256i v4;
  explicit FiveBitRegs(const uint8_t* b) : blk(b), v4(load32(b + 128)) {}
  [[gnu::always_inline]] __m256i reg(int c) const {
    const int i = c % 4;
    const __m256i vi = load32(blk + 32 * i);
    if (c < 4) return _mm256_and_si256(vi, _mm256_set1_epi8(0x1F));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(vi, 3), _mm256_set1_epi8(0x1C));
    const __m256i low = _mm256_and_si256(i ? _mm256_srli_epi16(v4, 2 * i) : v4, _mm256_set1_epi8(0x03));
    return _mm256_or_si256(top, low);
  }
};

// Q6_K: register c < 4 is the low nibbles of V_c with bits 4-5 from bits 2c.. of H0, register
// 4 + c the high nibbles with H1's (16-bit shifts: the mask drops what crosses a byte).
struct Q6kRegs {
  const uint8_t* blk;
  __m256i h0, h1;
  explicit Q6kRegs(const uint8_t* b) : blk(b), h0(load32(b + 128)), h1(load32(b + 160)) {}
  [[gnu::always_inline]] __m256i reg(int c) const {
    const int i = c % 4;
    const __m256i h = c < 4 ? h0 : h1;
    const __m256i top = i == 3 ? _mm256_srli_epi16(h, 2) : _mm256_slli_epi16(h, 4 - 2 * i);
    return _mm256_or_si256(NibbleRegs{blk}.reg(c), _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
  }
};

// Q3_K: registers c and 4 + c (c < 3) are the nibbles of R_c masked to 3 bits; registers 3 and 7
// those of V, gathered from bits 3 and 7 of R0-R2 (16-bit shifts: the masks drop what crosses
// into the next byte).
struct Q3kRegs {
  __m256i r[3], v;
  explicit Q3kRegs(const uint8_t* blk) : r{load32(blk), load32(blk + 32), load32(blk + 64)} {
    v = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(r[0], 3), _mm256_set1_epi8(0x11)),
                                        _mm256_and_si256(_mm256_srli_epi16(r[1], 2), _mm256_set1_epi8(0x22))),
                        _mm256_and_si256(_mm256_srli_epi16(r[2], 1), _mm256_set1_epi8(0x44)));
  }
  [[gnu::always_inline]] __m256i reg(int c) const {
    const __m256i n = c % 4 < 3 ? r[c % 4] : v;
    return _mm256_and_si256(c < 4 ? n : _mm256_srli_epi16(n, 4), _mm256_set1_epi8(0x07));
  }
};

// Q2_K: register c is bits 2c.. of L0, 4 + c of L1.
struct Q2kRegs {
  __m256i l0, l1;
  explicit Q2kRegs(const uint8_t* blk) : l0(load32(blk)), l1(load32(blk + 32)) {}
  [[gnu::always_inline]] __m256i reg(int c) const {
    return _mm256_and_si256(_mm256_srli_epi16(c < 4 ? l0 : l1, 2 * (c % 4)), _mm256_set1_epi8(0x03));
  }
};

// Q8_0: 8 registers of int8 quants.
struct Int8Regs {
  const uint8_t* blk;
  [[gnu::always_inline]] __m256i reg(int c) const { return load32(blk + 32 * c); }
};

// The reader of block j of a tile.
template <GgmlType T>
[[gnu::always_inline]] inline auto block_regs(const uint8_t* tile, int j) {
  const uint8_t* blk = tile + packed_head_bytes(T) + packed_block_bytes(T) * j;
  if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::Q4_K) return NibbleRegs{blk};
  else if constexpr (T == GgmlType::IQ4_XS || T == GgmlType::IQ4_NL) return Iq4Regs(blk);
  else if constexpr (T == GgmlType::Q5_K || T == GgmlType::Q5_0 || T == GgmlType::Q5_1) return FiveBitRegs(blk);
  else if constexpr (T == GgmlType::Q6_K) return Q6kRegs(blk);
  else if constexpr (T == GgmlType::Q3_K) return Q3kRegs(blk);
  else if constexpr (T == GgmlType::Q2_K) return Q2kRegs(blk);
  else return Int8Regs{blk};
}

// ---- Block sums of packed blocks -----------------------------------------------------------

// sum(u * x) of a 5-bit block (FiveBitRegs) for R activation rows. u <= 31, so a vpmaddubsw word
// is at most 2 * 31 * 127 and four of them add in 16 bits without overflow before vpmaddwd.
template <int R>
[[gnu::always_inline]] inline void five_bit_block_sums(const FiveBitRegs& regs, const ActRowPtrs x[R], int64_t b,
                                                       __m256i isum[R]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i w[R];
  [&]<int... C>(std::integer_sequence<int, C...>) __attribute__((always_inline)) {
    ([&] {
      constexpr int c = C;
      const __m256i u = regs.reg(c);
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_maddubs_epi16(u, broadcast4(x[r].q + 32 * b + 4 * c));
        w[r] = c % 4 ? _mm256_add_epi16(w[r], p) : p;
        if constexpr (c == 3) isum[r] = _mm256_madd_epi16(w[r], ones);
        if constexpr (c == 7) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(w[r], ones));
      }
    }(), ...);
  }(std::make_integer_sequence<int, 8>{});
}

// sum(u * x) of a nibble block (NibbleRegs) for R activation rows. u <= 15, so a vpmaddubsw word
// is at most 2 * 15 * 127 and all eight of a block add in 16 bits before one vpmaddwd.
template <int R>
[[gnu::always_inline]] inline void nibble_block_sums(const NibbleRegs& regs, const ActRowPtrs x[R], int64_t b,
                                                     __m256i isum[R]) {
  __m256i w[R];
  for (int c = 0; c < 4; ++c) {
    const __m256i lo = regs.reg(c), hi = regs.reg(4 + c);
    for (int r = 0; r < R; ++r) {
      const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast4(x[r].q + 32 * b + 4 * c)),
                                         _mm256_maddubs_epi16(hi, broadcast4(x[r].q + 32 * b + 16 + 4 * c)));
      w[r] = c ? _mm256_add_epi16(w[r], p) : p;
    }
  }
  for (int r = 0; r < R; ++r) isum[r] = _mm256_madd_epi16(w[r], _mm256_set1_epi16(1));
}

// Block j of a Q6_K tile for R activation rows. u <= 63, so a vpmaddubsw word is at most
// 2 * 63 * 127 and two add in 16 bits before vpmaddwd. Registers 0-3 are the block's first
// 16-element sub-block (sum0), 4-7 its second.
template <int R, int j>
inline void q6k_packed_block(const uint8_t* tile, const ActRowPtrs x[R], const GroupScales<GgmlType::Q6_K>& sc,
                             int64_t b, __m256 acc[R]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const Q6kRegs regs = block_regs<GgmlType::Q6_K>(tile, j);
  __m256i sum0[R], sum1[R], w0[R], w1[R];
  [&]<int... C>(std::integer_sequence<int, C...>) __attribute__((always_inline)) {
    ([&] {
      constexpr int c = C;
      const __m256i ua = regs.reg(c), ub = regs.reg(4 + c);
      for (int r = 0; r < R; ++r) {
        const __m256i pa = _mm256_maddubs_epi16(ua, broadcast4(x[r].q + 32 * b + 4 * c));
        const __m256i pb = _mm256_maddubs_epi16(ub, broadcast4(x[r].q + 32 * b + 16 + 4 * c));
        if constexpr (c % 2 == 0) {
          w0[r] = pa, w1[r] = pb;
        } else {
          const __m256i d0 = _mm256_madd_epi16(_mm256_add_epi16(w0[r], pa), ones);
          const __m256i d1 = _mm256_madd_epi16(_mm256_add_epi16(w1[r], pb), ones);
          sum0[r] = c == 1 ? d0 : _mm256_add_epi32(sum0[r], d0);
          sum1[r] = c == 1 ? d1 : _mm256_add_epi32(sum1[r], d1);
        }
      }
    }(), ...);
  }(std::make_integer_sequence<int, 4>{});
  for (int r = 0; r < R; ++r) acc[r] = block_epilogue<GgmlType::Q6_K>(acc[r], sum0[r], sum1[r], sc, j, x[r], b);
}

// sum(u * x) of the two 16-element halves of one block (registers c < 4: the first half, 4 + c:
// the second), u at most 7 (Q3kRegs, Q2kRegs): a vpmaddubsw word is at most 2 * 7 * 127, so the
// four of a half add in 16 bits before one vpmaddwd.
template <int R, class Regs>
[[gnu::always_inline]] inline void small_block_sums(const Regs& regs, const ActRowPtrs x[R], int64_t b, __m256i sum0[R],
                                                    __m256i sum1[R]) {
  __m256i w0[R], w1[R];
  for (int c = 0; c < 4; ++c) {
    const __m256i first = regs.reg(c), second = regs.reg(4 + c);
    for (int r = 0; r < R; ++r) {
      const __m256i pa = _mm256_maddubs_epi16(first, broadcast4(x[r].q + 32 * b + 4 * c));
      const __m256i pb = _mm256_maddubs_epi16(second, broadcast4(x[r].q + 32 * b + 16 + 4 * c));
      w0[r] = c ? _mm256_add_epi16(w0[r], pa) : pa;
      w1[r] = c ? _mm256_add_epi16(w1[r], pb) : pb;
    }
  }
  for (int r = 0; r < R; ++r) {
    sum0[r] = _mm256_madd_epi16(w0[r], _mm256_set1_epi16(1));
    sum1[r] = _mm256_madd_epi16(w1[r], _mm256_set1_epi16(1));
  }
}

// Block j of a Q3_K or Q2_K tile for R activation rows.
template <GgmlType T, int R, int j>
inline void small_quant_packed_block(const uint8_t* tile, const ActRowPtrs x[R], const GroupScales<T>& sc, int64_t b,
                                     __m256 acc[R]) {
  __m256i sum0[R], sum1[R];
  small_block_sums<R>(block_regs<T>(tile, j), x, b, sum0, sum1);
  for (int i = 0; i < R; ++i) acc[i] = block_epilogue<T>(acc[i], sum0[i], sum1[i], sc, j, x[i], b);
}

// sum(q * x) of one block of signed quants (Iq4Regs, Int8Regs) for R activation rows: dot_s8
// against the broadcast activations (a second, |x| copy of them, to save the |q|, measured no
// faster for IQ4). q can be -128 in Q8_0: |q| = 128 read unsigned, so words reach 2 * 128 * 127
// and each goes through vpmaddwd on its own.
template <int R, class Regs>
[[gnu::always_inline]] inline void signed_block_sums(const Regs& regs, const ActRowPtrs x[R], int64_t b,
                                                     __m256i isum[R]) {
  for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i lo = regs.reg(c), hi = regs.reg(4 + c);  // elements 4c.., 16 + 4c..
    for (int r = 0; r < R; ++r)
      isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(dot_s8(lo, broadcast4(x[r].q + 32 * b + 4 * c)),
                                                           dot_s8(hi, broadcast4(x[r].q + 32 * b + 16 + 4 * c))));
  }
}

// The block sums of block j of a tile whose blocks have one scale (sum0 only): nibble, 5-bit or
// signed registers.
template <GgmlType T, int R>
[[gnu::always_inline]] inline void whole_block_sums(const uint8_t* tile, int j, const ActRowPtrs x[R], int64_t b,
                                                    __m256i isum[R]) {
  const auto regs = block_regs<T>(tile, j);
  if constexpr (signed_weights(T)) signed_block_sums<R>(regs, x, b, isum);
  else if constexpr (std::is_same_v<std::remove_cv_t<decltype(regs)>, FiveBitRegs>) five_bit_block_sums<R>(regs, x, b, isum);
  else nibble_block_sums<R>(regs, x, b, isum);
}

// Block j of a Q4_K, Q5_K or IQ4_XS tile (a header, then per block nibble or 5-bit registers,
// weight_pack.h) for R activation rows: its block sums, then block_epilogue with the tile's
// group scales.
template <GgmlType T, int R, int j>
inline void header_packed_block(const uint8_t* tile, const ActRowPtrs x[R], const GroupScales<T>& sc, int64_t b,
                                __m256 acc[R]) {
  __m256i isum[R];
  whole_block_sums<T, R>(tile, j, x, b, isum);
  for (int r = 0; r < R; ++r) acc[r] = block_epilogue<T>(acc[r], isum[r], _mm256_setzero_si256(), sc, j, x[r], b);
}

// The fp16 d of block j of a 32-element-block type's tile for its 8 rows (weight_pack.cpp: at
// 16j), and for Q4_1 / Q5_1 m = -min (as block_scales has it) from their fp16 min at 128 + 16j.
inline __m256 small_tile_d(const uint8_t* tile, int j) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 * j)));
}
inline __m256 small_tile_m(const uint8_t* tile, int j) {
  const __m256 min = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 128 + 16 * j)));
  return _mm256_xor_ps(min, _mm256_set1_ps(-0.f));
}

// Block j of a tile of a 32-element-block type for R activation rows: the block sums of its
// quant form, then block_epilogue's float steps with the block's d (offset types: minus the
// call's offset * sum(x); affine types: minus sum(x) * m).
template <GgmlType T, int R, int j>
inline void small_packed_block(const uint8_t* tile, const ActRowPtrs x[R], int64_t b, __m256 acc[R]) {
  __m256i isum[R];
  whole_block_sums<T, R>(tile, j, x, b, isum);
  const __m256 d = small_tile_d(tile, j);
  for (int r = 0; r < R; ++r) {
    __m256i s = isum[r];
    if constexpr (has_block_correction(T)) s = _mm256_sub_epi32(s, _mm256_set1_epi32(x[r].corr[b]));
    const __m256 dx = _mm256_set1_ps(x[r].d[b]);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), acc[r]);
    if constexpr (block_min(T))
      acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(x[r].fsum[b]), _mm256_mul_ps(small_tile_m(tile, j), dx), acc[r]);
  }
}

// s0 / s1 of the 16 sub-blocks of a tile: d (the rows' fp16 scales) times their int8 scales,
// sub-block s's 8 rows at scales + 8s (as Q6_K's tile stores them, and Q3_K's sc - 32 once
// decoded), as store_fields makes them.
template <GgmlType T>
inline void int8_sub_block_scales(const int8_t* scales, __m256 d, GroupScales<T>& sc) {
  for (int s = 0; s < 16; ++s) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * s));
    _mm256_store_ps(s % 2 ? sc.s1[s / 2] : sc.s0[s / 2], _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
  }
}

// The group scales of a tile from its fp16 scales in row order and its sub-block fields
// (weight_pack.cpp): Q4_K / Q5_K / IQ4_XS store theirs 6 bits each in the transposed layout
// store_fields reads; Q6_K, Q3_K and Q2_K theirs per sub-block, 8 rows after another.
template <GgmlType T>
inline void packed_tile_scales(const uint8_t* tile, GroupScales<T>& sc) {
  const __m256i low6 = _mm256_set1_epi8(0x3F), low2 = _mm256_set1_epi8(0x03), low4 = _mm256_set1_epi8(0x0F);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile)));
  __m256i t[4];
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16)));
    const __m256i p0 = load32(tile + 32), p1 = load32(tile + 64), p2 = load32(tile + 96);
    t[0] = _mm256_and_si256(p0, low6);
    t[1] = _mm256_and_si256(p1, low6);
    t[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p0, 6), low2), _mm256_slli_epi16(_mm256_and_si256(p2, low4), 2));
    t[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(p1, 6), low2),
                           _mm256_and_si256(_mm256_srli_epi16(p2, 2), _mm256_set1_epi8(0x3C)));
    store_fields<T>(t, d, dmin, sc);
  } else if constexpr (T == GgmlType::Q6_K) {
    int8_sub_block_scales(reinterpret_cast<const int8_t*>(tile + 16), d, sc);
  } else if constexpr (T == GgmlType::Q3_K) {
    // The 16 x 8 six-bit fields F[8s + l] (weight_pack.cpp) decoded to sc - 32 (as block_scales)
    // in Q6_K's order: 32 bytes per 4 sub-blocks.
    const __m256i n0 = load32(tile + 16), n1 = load32(tile + 48), h = load32(tile + 80), top = _mm256_set1_epi8(0x30);
    const __m256i f[4] = {
        _mm256_or_si256(_mm256_and_si256(n0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), top)),
        _mm256_or_si256(_mm256_and_si256(n1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), top)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), low4), _mm256_and_si256(h, top)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), low4), _mm256_and_si256(_mm256_srli_epi16(h, 2), top))};
    alignas(32) int8_t scales[128];
    for (int m = 0; m < 4; ++m)
      _mm256_store_si256(reinterpret_cast<__m256i*>(scales + 32 * m), _mm256_sub_epi8(f[m], _mm256_set1_epi8(32)));
    int8_sub_block_scales(scales, d, sc);
  } else if constexpr (T == GgmlType::Q2_K) {
    // Each sub-block's 8 scale bytes: d times the low nibble, dmin times the high one.
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16)));
    for (int s = 0; s < 16; ++s) {
      const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 32 + 8 * s)));
      _mm256_store_ps(s % 2 ? sc.s1[s / 2] : sc.s0[s / 2],
                      _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)))));
      _mm256_store_ps(s % 2 ? sc.m1[s / 2] : sc.m[s / 2], _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4))));
    }
  } else {
    const __m256i q0 = load32(tile + 16);
    // Q1's 16 bytes in both lanes, the high nibbles moved down in lane 1.
    const __m256i q1 = _mm256_and_si256(_mm256_srlv_epi64(broadcast16(tile + 48), _mm256_setr_epi64x(0, 0, 4, 4)), low4);
    t[0] = _mm256_and_si256(q0, low6);
    t[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 6), low2), _mm256_slli_epi16(q1, 2));
    store_fields<T>(t, d, d, sc);
  }
}

// One tile as the prefill tile holds it (matmul_internal.h): every register of every block,
// and the scales that packed_tile_scales / small_tile_d give the decode epilogue, which are
// those of block_scales.
template <GgmlType T>
void unpack_packed_tile(const uint8_t* tile, uint8_t* u, int8_t* sg, float* s0, float* s1, float* m, float* m1) {
  [&]<int... J>(std::integer_sequence<int, J...>) {
    ([&] {
      const auto regs = block_regs<T>(tile, J);
      for (int c = 0; c < 8; ++c) {
        const __m256i v = regs.reg(c);
        if constexpr (signed_weights(T)) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(sg + 256 * J + 32 * c), v);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 256 * J + 32 * c), _mm256_abs_epi8(v));
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 256 * J + 32 * c), v);
        }
      }
    }(), ...);
  }(std::make_integer_sequence<int, 8>{});
  if constexpr (kBlocksPerGroup<T> == 8) {
    GroupScales<T> sc;
    packed_tile_scales<T>(tile, sc);
    for (int j = 0; j < 8; ++j) {
      _mm256_storeu_ps(s0 + 8 * j, _mm256_load_ps(sc.s0[j]));
      if constexpr (half_scales(T)) _mm256_storeu_ps(s1 + 8 * j, _mm256_load_ps(sc.s1[j]));
      if constexpr (block_min(T) || half_mins(T)) _mm256_storeu_ps(m + 8 * j, _mm256_load_ps(sc.m[j]));
      if constexpr (half_mins(T)) _mm256_storeu_ps(m1 + 8 * j, _mm256_load_ps(sc.m1[j]));
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      _mm256_storeu_ps(s0 + 8 * j, small_tile_d(tile, j));
      if constexpr (block_min(T)) _mm256_storeu_ps(m + 8 * j, small_tile_m(tile, j));
    }
  }
}

// The tiles of a thread's outputs are one sequential stream, prefetched kPrefetchTiles tiles
// ahead, a tile's lines spread over its 8 blocks. Measured on a Zen 3 class host (TinyLlama
// shapes): Q5_K from ~71% to ~85-95% of the streaming-read bandwidth (4 to 8 tiles ahead alike;
// no prefetch at all was the worst); IQ4_XS 6 tiles as good as 8; Q8_0, whose tiles are twice as
// large, 15.0 / 25.5 tok/s at 1 / 2 threads with 4 tiles (8.7 KiB) against 13.2 / 20.1 with 6
// (2 and 3 no better than 6; 2 and 8 again no better than 4 once the activations came from the
// row). The other types take 6 (for Q4_K and Q6_K, 4 and 10 measured no better; the types given
// tiles later were not tuned).

template <GgmlType T>
constexpr int kPrefetchLinesPerBlock = static_cast<int>((packed_tile_bytes(T) + 8 * 64 - 1) / (8 * 64));
template <GgmlType T>
constexpr size_t kPrefetchTiles = T == GgmlType::Q8_0 ? 4 : 6;

// R activation rows (i0..) x the 8 outputs of the group at o0 (a multiple of 8), over all of k;
// outputs o0 + [lo, hi) are stored.
template <GgmlType T, int R>
void packed_rows(const MatmulArgs& a, int64_t o0, int lo, int hi, int64_t i0) {
  const uint8_t* tiles = a.w + o0 * a.row_bytes;
  const size_t tiles_end = static_cast<size_t>(a.out_features / kGroup * kGroup) * a.row_bytes;
  const int64_t supers = a.k / 256;
  ActRowPtrs x[R];
  for (int r = 0; r < R; ++r) {
    x[r] = act_row(a, i0 + r);
  }
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  GroupScales<T> sc;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* tile = tiles + s * packed_tile_bytes(T);
    if constexpr (kBlocksPerGroup<T> == 8) packed_tile_scales<T>(tile, sc);
    [&]<int... J>(std::integer_sequence<int, J...>) {
      ([&] {
        // Within the packed tiles only (the next group's follow this group's in memory).
        constexpr int lines = kPrefetchLinesPerBlock<T>;
        const size_t ahead = static_cast<size_t>(tile - a.w) + kPrefetchTiles<T> * packed_tile_bytes(T) + 64 * lines * J;
        if (ahead + 64 * lines <= tiles_end)
          for (int l = 0; l < lines; ++l) _mm_prefetch(reinterpret_cast<const char*>(a.w + ahead + 64 * l), _MM_HINT_T0);
        if constexpr (kBlocksPerGroup<T> == 1) small_packed_block<T, R, J>(tile, x, 8 * s + J, acc);
        else if constexpr (T == GgmlType::Q2_K || T == GgmlType::Q3_K) small_quant_packed_block<T, R, J>(tile, x, sc, 8 * s + J, acc);
        else if constexpr (T == GgmlType::Q6_K) q6k_packed_block<R, J>(tile, x, sc, 8 * s + J, acc);
        else header_packed_block<T, R, J>(tile, x, sc, 8 * s + J, acc);
      }(), ...);
    }(std::make_integer_sequence<int, 8>{});
  }
  for (int r = 0; r < R; ++r) {
    float* out = a.out + (i0 + r) * a.out_features + o0;
    if (lo == 0 && hi == kGroup) {
      _mm256_storeu_ps(out, acc[r]);
    } else {
      alignas(32) float tmp[kGroup];
      _mm256_store_ps(tmp, acc[r]);
      std::memcpy(out + lo, tmp + lo, sizeof(float) * (hi - lo));
    }
  }
}

template <GgmlType T>
void packed_range(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  // Groups of 8 rows; a range that starts or ends inside a group (the dispatcher splits by 8,
  // so only if that changes) computes the group and stores its part.
  const int64_t full = a.out_features / kGroup * kGroup, end = std::min(o_end, full);
  for (int64_t o0 = o_begin / kGroup * kGroup; o0 < end; o0 += kGroup) {
    const int lo = static_cast<int>(std::max<int64_t>(o_begin - o0, 0));
    const int hi = static_cast<int>(std::min<int64_t>(end - o0, kGroup));
    for (int64_t i0 = 0; i0 < a.n; i0 += 2) {
      if (a.n - i0 >= 2) packed_rows<T, 2>(a, o0, lo, hi, i0);
      else packed_rows<T, 1>(a, o0, lo, hi, i0);
    }
  }
  // Rows past the last full group are in the GGML layout at their usual offsets.
  if (o_end > full) few_rows_range<T>(a, std::max(o_begin, full), o_end);
}

}  // namespace

void matmul_packed_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.type) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return packed_range<GgmlType::T>(a, o_begin, o_end);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

void unpack_packed_tile_avx2(GgmlType t, const uint8_t* group, int64_t super, uint8_t* u, int8_t* sg, float* s0, float* s1,
                             float* m, float* m1) {
  switch (t) {
#define PAGODA_CASE(T) \
  case GgmlType::T: return unpack_packed_tile<GgmlType::T>(group + super * packed_tile_bytes(GgmlType::T), u, sg, s0, s1, m, m1);
    PAGODA_INT8_WEIGHT_TYPES(PAGODA_CASE)
#undef PAGODA_CASE
    default: return;
  }
}

}  // namespace pagoda::cpu::detail
