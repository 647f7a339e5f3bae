// Skipping test cases of one instruction set (tagged [avx2], [avx512] or [amx]) where they cannot run:
// the CPU lacks the instructions, or PAGODA_CPU_ISA (which caps the kernels' level for tests and
// benchmarks, kernels/cpu/cpu_features.h) sets a lower level - the way to see the skip path on a
// host that has them. The skip is tests/support/skip.h's: CTest counts the case as skipped.
#pragma once

#include <algorithm>
#include <string>

#include "kernels/cpu/cpu_features.h"
#include "tests/support/skip.h"

namespace pagoda::testing {

// True when this CPU has what the case needs (`cpu_has`, described by `what`) and the kernel
// level is not capped below `level`; otherwise records the skip, and the case should return.
inline bool isa_available(cpu::CpuIsa level, bool cpu_has, const std::string& what) {
  if (!cpu_has) return requirement_met(false, "this CPU lacks " + what);
  // Capped: the default level is below `level` though the CPU reaches it (a CPU that has `what`
  // but not all of `level`, e.g. AVX-512 without VNNI, is capped only below its own best).
  const int best = std::min(static_cast<int>(level), static_cast<int>(cpu::best_cpu_isa()));
  const bool capped = static_cast<int>(cpu::default_cpu_isa()) < best;
  return requirement_met(!capped, std::string("PAGODA_CPU_ISA=") + cpu::cpu_isa_name(cpu::default_cpu_isa()) +
                                      " caps the kernels below " + cpu::cpu_isa_name(level));
}

}  // namespace pagoda::testing
