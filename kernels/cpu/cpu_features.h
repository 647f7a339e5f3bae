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
enum class CpuIsa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false;
  bool os_avx = false, os_avx512 = false;  // XCR0 says the OS saves ymm / zmm state
};

// The features of this CPU (detected on the first call, then cached; thread-safe).
const CpuFeatures& cpu_features();

// The highest level this CPU supports.
CpuIsa best_cpu_isa();

// The level kernels use by default: best_cpu_isa(), lowered by the environment variable
// PAGODA_CPU_ISA=scalar|avx2|avx512 (for tests and benchmarks). A request above what the CPU
// supports is clamped to best_cpu_isa(); an unknown value is ignored. Read once, then cached.
CpuIsa default_cpu_isa();

// True when kernels of level `isa` can run here.
inline bool cpu_supports(CpuIsa isa) { return static_cast<int>(isa) <= static_cast<int>(best_cpu_isa()); }

// "scalar", "avx2", "avx512".
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
