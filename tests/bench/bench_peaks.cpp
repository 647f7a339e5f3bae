// Streaming-read bandwidth and int8 dot-product peak probes (see bench_peaks.h).
#include "tests/bench/bench_peaks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/cpu_features.h"

// GCC 12's AVX-512 intrinsic headers trip -Wuninitialized on their own placeholders.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace pagoda::bench {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t sum_bytes_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 1) ^ _mm256_extract_epi64(a, 2) ^
                               _mm256_extract_epi64(a, 3));
}

// kChains independent accumulators hide the instructions' latency; the operands never leave
// registers. Returns a value derived from every accumulator so nothing is optimized away.
constexpr int kChains = 12;
constexpr int64_t kIters = 1 << 20;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t vnni512_chain(int seed) {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(seed + c);
  __m512i w = _mm512_set1_epi8(static_cast<char>(seed | 1)), x = _mm512_set1_epi8(static_cast<char>(seed + 3));
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], w, x);
    __asm__ volatile("" : "+v"(w), "+v"(x));  // keeps the operands opaque to the compiler
  }
  __m512i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_epi32(s, acc[c]);
  return _mm512_reduce_add_epi32(s);
}

__attribute__((target("avx2"))) int64_t madd256_chain(int seed) {
  __m256i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi32(seed + c);
  __m256i w = _mm256_set1_epi8(static_cast<char>(seed | 1)), x = _mm256_set1_epi8(static_cast<char>(seed + 3));
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < kIters; ++i) {
    for (int c = 0; c < kChains; ++c)
      acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
    __asm__ volatile("" : "+x"(w), "+x"(x));
  }
  __m256i s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm256_add_epi32(s, acc[c]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}
#endif

uint64_t sum_bytes(const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  if (cpu::cpu_supports(cpu::CpuIsa::Avx2)) return sum_bytes_avx2(p, n);
#endif
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s ^= v;
  }
  return s;
}

}  // namespace

StreamProbe::StreamProbe() : buf_(kBytes + 64, 1) {
  p_ = buf_.data() + (64 - reinterpret_cast<uintptr_t>(buf_.data()) % 64) % 64;
}

void StreamProbe::read(cpu::ThreadPool& pool, const uint8_t* base, size_t bytes, int64_t chunks) {
  sink_.resize(static_cast<size_t>(pool.size()));
  const size_t per = bytes / static_cast<size_t>(chunks) / 128 * 128;
  pool.parallel_for(chunks, [&](int64_t b, int64_t e, int t) {
    const size_t len = e == chunks ? bytes - static_cast<size_t>(b) * per : static_cast<size_t>(e - b) * per;
    sink_[static_cast<size_t>(t)] ^= sum_bytes(base + b * per, len);
  });
}

void StreamProbe::pass(cpu::ThreadPool& pool) { read(pool, p_, kBytes, 1024); }

void StreamProbe::read_next(cpu::ThreadPool& pool, size_t bytes) {
  bytes = std::min(bytes / 128 * 128, kBytes);
  if (next_ + bytes > kBytes) next_ = 0;
  read(pool, p_ + next_, bytes, std::max<int64_t>(1, static_cast<int64_t>(bytes >> 18)));  // ~256 KiB chunks
  next_ += bytes;
}

double StreamProbe::gbps(cpu::ThreadPool& pool, const Timing& timing) {
  return static_cast<double>(kBytes) / median_seconds(timing, 5, [&] { pass(pool); }) / 1e9;
}

double stream_read_gbps(cpu::ThreadPool& pool, const Timing& timing) { return StreamProbe().gbps(pool, timing); }

double int8_peak_gops(cpu::ThreadPool& pool, const Timing& timing, std::string& what) {
#if defined(__x86_64__)
  const cpu::CpuIsa isa = cpu::default_cpu_isa();
  if (isa == cpu::CpuIsa::Scalar) {
    what = "no SIMD int8 level";
    return 0;
  }
  const bool vnni = cpu::vector_isa(isa) == cpu::CpuIsa::Avx512;
  what = vnni ? "AVX-512 VNNI vpdpbusd" : "AVX2 vpmaddubsw+vpmaddwd+vpaddd";
  // The AMX tiles' own peak is not probed: AMX prefill figures may pass 100% of this one.
  if (isa == cpu::CpuIsa::Amx) what += " (AMX prefill is measured against this VNNI peak)";
  // Multiply-adds per instruction chain step: 64 (zmm, 4 per dword lane) or 32 (ymm).
  const double macs_per_step = vnni ? 64 : 32;
  std::vector<int64_t> sink(static_cast<size_t>(pool.size()));
  const double s = median_seconds(timing, 5, [&] {
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t, int t) {
      sink[static_cast<size_t>(t)] += vnni ? vnni512_chain(static_cast<int>(b)) : madd256_chain(static_cast<int>(b));
    });
  });
  return 2.0 * macs_per_step * kChains * static_cast<double>(kIters) * pool.size() / s / 1e9;
#else
  (void)pool;
  (void)timing;
  what = "not measured on this architecture";
  return 0;
#endif
}

}  // namespace pagoda::bench
