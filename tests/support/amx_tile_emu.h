// A scalar emulator of the AMX tile unit (palette 1), as a tile-operations policy for
// kernels/cpu/matmul_amx_kernel.h: the same kernel body that runs on the real tiles runs here on
// hosts without AMX. It follows the instructions' documented semantics:
//   * Tiles tmm0-tmm7 (a number past them does not compile, as it does not assemble).
//   * LDTILECFG: palette 1 only, start_row 0, reserved bytes zero; tiles 0-7 at most 16 rows of
//     at most 64 bytes, rows and colsb both zero or both non-zero; tiles 8-15 all zero.
//   * TILEZERO zeroes the whole register; TILELOADD reads rows x colsb bytes at base + r * stride
//     and zeroes the rest of the register; TILESTORED writes rows x colsb bytes.
//   * TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD: C[m][n] += sum over k < A.colsb / 4 and i < 4 of
//     A[m][4k + i] * B[k][4n + i], A's bytes signed for BS*/unsigned for BU*, B's signed for
//     *SD/unsigned for *UD, summed in 32 bits with wrap-around; the shapes must agree (A.rows ==
//     C.rows, A.colsb == 4 * B.rows, B.colsb == C.colsb, colsb multiples of 4) and the three
//     registers differ; the rest of C past its rows and colsb is zeroed.
//   * TILERELEASE returns to the initial state (unconfigured, zero registers).
// Anything the hardware would fault on (#UD, #GP) throws std::logic_error here, so a kernel that
// misuses the tiles fails its test instead of passing. Each instance is one thread's tile state.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/matmul_amx_tiles.h"

namespace pagoda::testing {
// Local to each including file (like the kernel it runs): the emulated kernel's file is compiled
// with AVX-512 flags, and a shared inline copy of these members could reach portable code.
namespace {

class AmxTileEmu {
 public:
  static constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

  // Counts of dot-product instructions run, for tests that must see the tiles used.
  int64_t dot_products = 0;

  void config(const cpu::detail::TileConfig& c) {
    if (c.palette != 1) fault("LDTILECFG: only palette 1 is emulated");
    if (c.start_row != 0) fault("LDTILECFG: start_row must be 0");
    for (uint8_t b : c.reserved)
      if (b != 0) fault("LDTILECFG: reserved bytes must be 0");
    for (int t = 0; t < 16; ++t) {
      const bool used = t < kTiles;
      if (!used && (c.rows[t] != 0 || c.colsb[t] != 0)) fault("LDTILECFG: tiles 8-15 do not exist in palette 1");
      if (c.rows[t] > kMaxRows || c.colsb[t] > kMaxColsb) fault("LDTILECFG: tile " + std::to_string(t) + " too large");
      if ((c.rows[t] == 0) != (c.colsb[t] == 0)) fault("LDTILECFG: rows and colsb of a tile are both zero or neither");
    }
    cfg_ = c;
    configured_ = true;
    std::memset(reg_, 0, sizeof(reg_));
  }

  // Tile numbers are immediates: one past tmm7 does not assemble, here it does not compile.
  template <int T>
  void zero() {
    static_assert(T >= 0 && T < kTiles, "no such tile");
    check_tile(T, "TILEZERO");
    std::memset(reg_[T], 0, sizeof(reg_[T]));
  }

  template <int T>
  void load(const void* base, size_t stride) {
    static_assert(T >= 0 && T < kTiles, "no such tile");
    check_tile(T, "TILELOADD");
    std::memset(reg_[T], 0, sizeof(reg_[T]));
    const auto* p = static_cast<const uint8_t*>(base);
    for (int r = 0; r < cfg_.rows[T]; ++r) std::memcpy(reg_[T][r], p + r * stride, cfg_.colsb[T]);
  }

  template <int T>
  void store(void* base, size_t stride) const {
    static_assert(T >= 0 && T < kTiles, "no such tile");
    check_tile(T, "TILESTORED");
    auto* p = static_cast<uint8_t*>(base);
    for (int r = 0; r < cfg_.rows[T]; ++r) std::memcpy(p + r * stride, reg_[T][r], cfg_.colsb[T]);
  }

  template <int C, int A, int B>
  void dpbssd() { dot<C, A, B, true, true>("TDPBSSD"); }
  template <int C, int A, int B>
  void dpbsud() { dot<C, A, B, true, false>("TDPBSUD"); }
  template <int C, int A, int B>
  void dpbusd() { dot<C, A, B, false, true>("TDPBUSD"); }
  template <int C, int A, int B>
  void dpbuud() { dot<C, A, B, false, false>("TDPBUUD"); }

  void release() {
    configured_ = false;
    cfg_ = cpu::detail::TileConfig{};
    std::memset(reg_, 0, sizeof(reg_));
  }

  bool configured() const { return configured_; }

 private:
  [[noreturn]] static void fault(const std::string& why) { throw std::logic_error("AMX emulator: " + why); }

  void check_tile(int t, const char* op) const {
    if (!configured_) fault(std::string(op) + " before LDTILECFG (or after TILERELEASE)");
    if (cfg_.rows[t] == 0) fault(std::string(op) + ": tile " + std::to_string(t) + " is not configured");
  }

  template <int C, int A, int B, bool ASigned, bool BSigned>
  void dot(const char* op) {
    static_assert(C >= 0 && C < kTiles && A >= 0 && A < kTiles && B >= 0 && B < kTiles, "no such tile");
    check_tile(C, op), check_tile(A, op), check_tile(B, op);
    if (C == A || C == B || A == B) fault(std::string(op) + ": the three tiles must differ");
    const int m_rows = cfg_.rows[C], n_cols = cfg_.colsb[C] / 4, k_dw = cfg_.colsb[A] / 4;
    if (cfg_.rows[A] != m_rows || cfg_.colsb[A] % 4 != 0 || cfg_.colsb[B] % 4 != 0 || cfg_.colsb[C] % 4 != 0 ||
        cfg_.rows[B] != k_dw || cfg_.colsb[B] != cfg_.colsb[C])
      fault(std::string(op) + ": tile shapes disagree");
    for (int m = 0; m < m_rows; ++m) {
      for (int n = 0; n < n_cols; ++n) {
        uint32_t acc;
        std::memcpy(&acc, &reg_[C][m][4 * n], 4);
        for (int k = 0; k < k_dw; ++k)
          for (int i = 0; i < 4; ++i) {
            const uint8_t ab = reg_[A][m][4 * k + i], bb = reg_[B][k][4 * n + i];
            const int32_t av = ASigned ? static_cast<int8_t>(ab) : ab, bv = BSigned ? static_cast<int8_t>(bb) : bb;
            acc += static_cast<uint32_t>(av * bv);  // 32-bit wrap-around, as the hardware
          }
        std::memcpy(&reg_[C][m][4 * n], &acc, 4);
      }
      std::memset(&reg_[C][m][4 * n_cols], 0, kMaxColsb - 4 * n_cols);
    }
    for (int m = m_rows; m < kMaxRows; ++m) std::memset(reg_[C][m], 0, kMaxColsb);
    ++dot_products;
  }

  cpu::detail::TileConfig cfg_;
  bool configured_ = false;
  uint8_t reg_[kTiles][kMaxRows][kMaxColsb] = {};
};

}  // namespace
}  // namespace pagoda::testing
