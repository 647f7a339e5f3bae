// The AMX level's quantized prefill on the real tiles: matmul_amx_kernel.h's body with the tile
// intrinsics as its policy. Compiled with the AVX-512 and AMX flags (CMakeLists.txt) and only
// called when cpu_supports(CpuIsa::Amx), i.e. when the CPU has AMX-TILE and AMX-INT8 and the OS
// saves the tile state and has let this process use it (cpu_features.cpp). Verified bit for bit
// against the AVX-512 and scalar kernels through the same body on the tile emulator
// (tests/unit/kernels/test_matmul_amx.cpp), and on the tiles themselves where a host has them.
// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own _mm512_undefined_*()
// placeholders when inlined; the warnings are about the headers (so the pragmas come before
// them), not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include "kernels/cpu/matmul_amx_kernel.h"

namespace pagoda::cpu::detail {
namespace {

// Calls OP(n) with the tile number T as a literal: GCC's tile intrinsics are macros that paste
// their register numbers into the instruction text, so a template parameter cannot reach them.
#define PAGODA_WITH_TILE(T, OP)              \
  do {                                       \
    static_assert(T >= 0 && T < 8, "tile");  \
    if constexpr (T == 0) OP(0);             \
    else if constexpr (T == 1) OP(1);        \
    else if constexpr (T == 2) OP(2);        \
    else if constexpr (T == 3) OP(3);        \
    else if constexpr (T == 4) OP(4);        \
    else if constexpr (T == 5) OP(5);        \
    else if constexpr (T == 6) OP(6);        \
    else OP(7);                              \
  } while (0)

// The tile operations as the AMX instructions.
struct AmxTileOps {
  void config(const TileConfig& c) { _tile_loadconfig(&c); }
  template <int T>
  void zero() {
#define PAGODA_OP(n) _tile_zero(n)
    PAGODA_WITH_TILE(T, PAGODA_OP);
#undef PAGODA_OP
  }
  template <int T>
  void load(const void* base, size_t stride) {
#define PAGODA_OP(n) _tile_loadd(n, base, static_cast<long>(stride))
    PAGODA_WITH_TILE(T, PAGODA_OP);
#undef PAGODA_OP
  }
  template <int T>
  void store(void* base, size_t stride) {
#define PAGODA_OP(n) _tile_stored(n, base, static_cast<long>(stride))
    PAGODA_WITH_TILE(T, PAGODA_OP);
#undef PAGODA_OP
  }
  // The (C, A, B) triples matmul_amx_kernel.h uses.
  template <int C, int A, int B>
  void dpbsud() {
    if constexpr (C == kC00 && A == kA0 && B == kB0) _tile_dpbsud(0, 4, 6);
    else if constexpr (C == kC01 && A == kA0 && B == kB1) _tile_dpbsud(1, 4, 7);
    else if constexpr (C == kC10 && A == kA1 && B == kB0) _tile_dpbsud(2, 5, 6);
    else if constexpr (C == kC11 && A == kA1 && B == kB1) _tile_dpbsud(3, 5, 7);
    else static_assert(C < 0, "add the tile triple here");
  }
  void release() { _tile_release(); }
};
#undef PAGODA_WITH_TILE

}  // namespace

void matmul_range_amx(const MatmulArgs& a, int64_t o_begin, int64_t o_end) { amx_range<AmxTileOps>(a, o_begin, o_end); }

}  // namespace pagoda::cpu::detail
