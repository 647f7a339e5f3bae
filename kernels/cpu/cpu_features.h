// What the CPU can run, detected once with cpuid + xgetbv (the OS must also save the wide
// registers), and the kernel level ("ISA") pagoda uses.
#pragma once

#include <cstddef>
#include <string>

namespace pagoda::cpu {

// Kernel levels, ordered: a level implies every lower one.
//   Scalar: portable C++ (any CPU).
//   Avx2:   AVX2 + FMA + F16C.
//   Avx512: AVX-512 F/BW/VL/DQ + VNNI (int8 dot products) on top of Avx2.
//   Amx:    Avx512 plus AMX-TILE + AMX-INT8 tiles that the OS saves and lets this process use
//           (XCR0 XTILECFG/XTILEDATA, and on Linux the arch_prctl permission for the tile data):
//           quantized prefill matmuls run on tiles (matmul_amx.cpp), every other kernel runs its
//           Avx512 version. PAGODA_CPU_ISA=avx512 turns the tiles off (A/B comparisons).
enum class CpuIsa { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };

// The vector level whose kernels run at `isa`: Amx adds tiles to the Avx512 kernels, so it is
// Avx512 for everything but the tile kernels (decode layouts, the few-rows kernels, floats).
constexpr CpuIsa vector_isa(CpuIsa isa) { return isa == CpuIsa::Amx ? CpuIsa::Avx512 : isa; }

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool os_avx = false, os_avx512 = false;  // XCR0 says the OS saves ymm / zmm state
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;  // CPUID leaf 7 EDX bits 24, 25, 22
  bool os_amx = false;       // XCR0 bits 17 and 18: the OS saves the tile config and tile data
  bool amx_permitted = false;  // the OS let this process use the tile data (Linux: arch_prctl)
};

// The features of this CPU (detected on the first call, then cached; thread-safe). Where the CPU
// and the OS have AMX tiles, the first call also asks Linux once for this process's permission to
// use them (arch_prctl ARCH_REQ_XCOMP_PERM), which every thread then has.
const CpuFeatures& cpu_features();

// The highest level this CPU supports.
CpuIsa best_cpu_isa();

// The level kernels use by default: best_cpu_isa(), lowered by the environment variable
// PAGODA_CPU_ISA=scalar|avx2|avx512|amx (for tests and benchmarks). A request above what the CPU
// supports is clamped to best_cpu_isa(); an unknown value is ignored. Read once, then cached.
CpuIsa default_cpu_isa();

// True when kernels of level `isa` can run here.
inline bool cpu_supports(CpuIsa isa) { return static_cast<int>(isa) <= static_cast<int>(best_cpu_isa()); }

// "scalar", "avx2", "avx512", "amx".
const char* cpu_isa_name(CpuIsa isa);

// Parses a level name as above; returns false for an unknown name.
bool parse_cpu_isa(const std::string& name, CpuIsa& out);

// Data cache sizes in bytes as the OS reports them (per core for L1/L2, per package for L3),
// read once at run time so that kernels and benchmarks size their blocks for the host they run
// on; a level the OS does not report reads as a typical size (32K, 1M, 32M).
struct CpuCaches {
  size_t l1d = 0, l2 = 0, l3 = 0;
};
const CpuCaches& cpu_caches();

// One line describing the CPU's relevant features, for logs.
std::string cpu_features_string();

}  // namespace pagoda::cpu
