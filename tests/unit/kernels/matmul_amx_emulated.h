// The AMX prefill kernel body on the tile emulator (matmul_amx_emulated.cpp), for
// test_matmul_amx.cpp: call only where cpu_supports(CpuIsa::Avx512) (the body's epilogue and
// weight tile are AVX-512 code).
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul_internal.h"

namespace pagoda::testing {

// matmul_amx_kernel.h's amx_range on AmxTileEmu: a RangeKernel for cpu::detail::matmul_amx_level.
void matmul_range_amx_emulated(const cpu::detail::MatmulArgs& a, int64_t o_begin, int64_t o_end);

// What the emulated calls did since the last reset: dot-product instructions run, calls (one
// emulator each), and calls that returned with the tiles still configured (no TILERELEASE).
struct AmxEmuStats {
  int64_t dot_products = 0, calls = 0, unreleased = 0;
};
AmxEmuStats amx_emu_stats();
void reset_amx_emu_stats();

}  // namespace pagoda::testing
