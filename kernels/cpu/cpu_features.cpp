#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <unistd.h>

#if defined(__linux__)
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define PAGODA_X86 1
#endif

namespace pagoda::cpu {

namespace {

#ifdef PAGODA_X86
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux keeps the AMX tile data (8 KiB of state per thread) off until a process asks for it;
// without this a tile instruction faults. True when the permission is granted (or already was).
// Kernels before 5.16 lack the request and never enable the state in XCR0 either.
bool request_tile_data_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h)
  constexpr long kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef PAGODA_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  uint64_t xcr0 = 0;
  if (osxsave && avx) {
    xcr0 = read_xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;            // SSE + AVX state
    f.os_avx512 = f.os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask + zmm state
    f.os_amx = (xcr0 & (uint64_t{3} << 17)) == (uint64_t{3} << 17);  // XTILECFG + XTILEDATA
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = (b >> 5) & 1;
    f.avx512f = (b >> 16) & 1;
    f.avx512dq = (b >> 17) & 1;
    f.avx512bw = (b >> 30) & 1;
    f.avx512vl = (b >> 31) & 1;
    f.avx512_vnni = (c >> 11) & 1;
    f.amx_bf16 = (d >> 22) & 1;
    f.amx_tile = (d >> 24) & 1;
    f.amx_int8 = (d >> 25) & 1;
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1;
  }
  if (f.amx_tile && f.os_amx) f.amx_permitted = request_tile_data_permission();
#endif
  return f;
}

CpuIsa detect_best() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.os_avx && f.avx2 && f.fma && f.f16c;
  if (avx2 && f.os_avx512 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni)
    return f.amx_tile && f.amx_int8 && f.os_amx && f.amx_permitted ? CpuIsa::Amx : CpuIsa::Avx512;
  return avx2 ? CpuIsa::Avx2 : CpuIsa::Scalar;
}

// Size of the data or unified cache of `level` of CPU 0 from sysfs ("48K", "2048K", "260M"), or
// sysconf's figure, or 0.
size_t cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size)) break;
    if (l != level || type == "Instruction" || size.empty()) continue;
    size_t v = std::strtoull(size.c_str(), nullptr, 10);
    if (size.back() == 'K') v <<= 10;
    else if (size.back() == 'M') v <<= 20;
    if (v > 0) return v;
  }
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  const long v = sysconf(level == 1 ? _SC_LEVEL1_DCACHE_SIZE : level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  if (v > 0) return static_cast<size_t>(v);
#endif
  return 0;
}

}  // namespace

const CpuCaches& cpu_caches() {
  static const CpuCaches caches = [] {
    CpuCaches c;
    c.l1d = cache_bytes(1);
    c.l2 = cache_bytes(2);
    c.l3 = cache_bytes(3);
    // Typical sizes where the OS says nothing: kernels only use these to size blocks.
    if (c.l1d == 0) c.l1d = size_t(32) << 10;
    if (c.l2 == 0) c.l2 = size_t(1) << 20;
    if (c.l3 == 0) c.l3 = size_t(32) << 20;
    return c;
  }();
  return caches;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

CpuIsa best_cpu_isa() {
  static const CpuIsa best = detect_best();
  return best;
}

CpuIsa default_cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa want = best_cpu_isa();
    const char* env = std::getenv("PAGODA_CPU_ISA");
    if (env != nullptr && parse_cpu_isa(env, want) && !cpu_supports(want)) want = best_cpu_isa();
    return want;
  }();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Scalar: return "scalar";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Amx: return "amx";
  }
  return "?";
}

bool parse_cpu_isa(const std::string& name, CpuIsa& out) {
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Amx})
    if (name == cpu_isa_name(isa)) {
      out = isa;
      return true;
    }
  return false;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s = std::string("kernels=") + cpu_isa_name(default_cpu_isa()) + " (best " + cpu_isa_name(best_cpu_isa()) + ";";
  auto add = [&](bool on, const char* name) {
    if (on) s += std::string(" ") + name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.amx_tile, "amx_tile");
  add(f.amx_int8, "amx_int8");
  add(f.amx_bf16, "amx_bf16");
  // The CPU has tiles but the OS does not save them or refused this process their data.
  if (f.amx_tile && !(f.os_amx && f.amx_permitted)) s += f.os_amx ? " (amx not permitted)" : " (amx not enabled by the OS)";
  const CpuCaches& c = cpu_caches();
  return s + "; L1d " + std::to_string(c.l1d >> 10) + "K L2 " + std::to_string(c.l2 >> 10) + "K L3 " +
         std::to_string(c.l3 >> 20) + "M)";
}

}  // namespace pagoda::cpu
