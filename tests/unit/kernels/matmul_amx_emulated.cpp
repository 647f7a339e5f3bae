// Instantiates the AMX prefill kernel body (kernels/cpu/matmul_amx_kernel.h) on the tile emulator
// (tests/support/amx_tile_emu.h). Compiled with the AVX-512 kernel flags, like the kernel files
// (tests/unit/kernels/CMakeLists.txt); see matmul_amx_emulated.h.
// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own _mm512_undefined_*()
// placeholders when inlined; the warnings are about the headers (so the pragmas come before
// them), not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "tests/unit/kernels/matmul_amx_emulated.h"

#include <atomic>
#include <exception>

#include "kernels/cpu/matmul_amx_kernel.h"
#include "tests/support/amx_tile_emu.h"

namespace pagoda::testing {
namespace {

std::atomic<int64_t> g_dot_products{0}, g_calls{0}, g_unreleased{0};

// One call's emulator, adding its counts to the totals when the call ends.
struct CountingEmu : AmxTileEmu {
  ~CountingEmu() {
    g_dot_products += dot_products;
    ++g_calls;
    if (configured() && std::uncaught_exceptions() == 0) ++g_unreleased;
  }
};

}  // namespace

void matmul_range_amx_emulated(const cpu::detail::MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  cpu::detail::amx_range<CountingEmu>(a, o_begin, o_end);
}

AmxEmuStats amx_emu_stats() { return {g_dot_products.load(), g_calls.load(), g_unreleased.load()}; }

void reset_amx_emu_stats() { g_dot_products = 0, g_calls = 0, g_unreleased = 0; }

}  // namespace pagoda::testing
