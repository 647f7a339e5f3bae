// The AMX tile configuration the prefill kernel uses (matmul_amx_kernel.h), apart from the
// kernel so that plain (non-AVX-512) code can read it: the tile emulator of the tests
// (tests/support/amx_tile_emu.h) and its own tests.
#pragma once

#include <cstdint>

namespace pagoda::cpu::detail {

// The 64-byte operand of LDTILECFG (palette 1): bytes per row and rows of each tile register;
// entries of unused tiles must be zero.
struct alignas(64) TileConfig {
  uint8_t palette = 0;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// The tile registers the kernel uses, by role.
enum AmxTile : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

// The configuration for K-element steps (K = 16 or 32). `static` like matmul_internal.h's
// helpers: files compiled with AVX-512 and AMX flags include this too, and a shared inline copy
// of theirs could be linked into portable code.
static inline TileConfig amx_tile_config(int k_step) {
  TileConfig c;
  c.palette = 1;
  for (int t : {kC00, kC01, kC10, kC11}) c.rows[t] = 16, c.colsb[t] = 64;
  for (int t : {kA0, kA1}) c.rows[t] = 16, c.colsb[t] = static_cast<uint16_t>(k_step);
  for (int t : {kB0, kB1}) c.rows[t] = static_cast<uint8_t>(k_step / 4), c.colsb[t] = 64;
  return c;
}

}  // namespace pagoda::cpu::detail
