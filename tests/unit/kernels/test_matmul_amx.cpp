// The AMX level's quantized prefill: the tile emulator's semantics, the kernel body on the
// emulator bit-identical to the AVX-512 and scalar kernels for every int8-kernel type, batch size,
// shape, layout and thread count (on any host with AVX-512), and the real tiles the same way
// where the host has AMX (skipped, with the reason, elsewhere).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"
#include "tests/support/amx_tile_emu.h"
#include "tests/support/isa.h"
#include "tests/support/quant_blocks.h"
#include "tests/unit/kernels/matmul_amx_emulated.h"

using namespace pagoda;
using namespace pagoda::cpu;
using pagoda::testing::AmxTileEmu;
using pagoda::testing::amx_emu_stats;
using pagoda::testing::reset_amx_emu_stats;

namespace {

const GgmlType kInt8Types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                               GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};
const GgmlType kRows16Types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL,
                                 GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

bool k_quant(GgmlType t) { return ggml_type_info(t).block_size == 256; }

// Weights: every bit pattern of the quants and sub-block scales with small f16 scales
// (random_blocks), or quantized normal rows (valid blocks).
std::vector<uint8_t> weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed, bool valid_blocks) {
  return valid_blocks ? test::quantized_normal_rows(t, rows, cols, seed)
                      : test::random_blocks(t, rows, cols, seed, fp32_to_fp16(0.01f));
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = nd(rng) * (1.f + static_cast<float>(rng() % 4));
  return x;
}

// Index of the first float whose bits differ, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(a.size());
}

void require_same_bits(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
  const int64_t i = first_difference(want, got);
  INFO(what << ": first difference at " << i << (i >= 0 && i < static_cast<int64_t>(want.size())
                                                      ? " (" + std::to_string(want[i]) + " vs " + std::to_string(got[i]) + ")"
                                                      : std::string()));
  REQUIRE(i == -1);
}

std::string name(GgmlType t, int64_t out, int64_t in, int64_t n, size_t threads) {
  return std::string(ggml_type_info(t).name) + " " + std::to_string(out) + "x" + std::to_string(in) + " n=" +
         std::to_string(n) + " threads=" + std::to_string(threads);
}

// One problem through the scalar level, the Avx512 level and the AMX level with `tiles` (the
// emulated kernel, or the real one), all bit-identical.
void check_problem(ThreadPool& pool, GgmlType t, int64_t out, int64_t in, int64_t n, bool valid_blocks,
                   detail::RangeKernel tiles) {
  INFO(name(t, out, in, n, static_cast<size_t>(pool.size())) << (valid_blocks ? " valid blocks" : " random bytes"));
  const auto w = weights(t, out, in, static_cast<uint32_t>(out * 7 + in + n), valid_blocks);
  const auto x = random_x(n, in, static_cast<uint32_t>(n * 13 + in));
  const size_t size = static_cast<size_t>(n * out);
  std::vector<float> ref(size, NAN), vnni(size, NAN), amx(size, NAN);
  matmul(pool, CpuIsa::Scalar, t, w.data(), out, in, x.data(), n, ref.data());
  matmul(pool, CpuIsa::Avx512, t, w.data(), out, in, x.data(), n, vnni.data());
  detail::matmul_amx_level(pool, tiles, t, w.data(), false, out, in, x.data(), n, amx.data());
  require_same_bits(ref, vnni, "avx512 vs scalar");
  require_same_bits(ref, amx, "amx vs scalar");
}

// The emulated kernel on ranges of 16 outputs: every tile is cut in half (the dispatcher's
// ranges are whole tiles of 32 but for the last), which the kernel must handle alike.
void emulated_in_halves(const detail::MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  for (int64_t o = o_begin; o < o_end; o += 16)
    pagoda::testing::matmul_range_amx_emulated(a, o, std::min(o_end, o + 16));
}

// Rows16-packed weights (3 groups of 16 rows and 2 GGML rows) through the Avx512 level and the
// AMX level with `tiles`, against the scalar level on the GGML bytes.
void check_packed(GgmlType t, detail::RangeKernel tiles) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t rows = 50, cols = k_quant(t) ? 768 : 640;
  for (int pattern = 0; pattern < 2; ++pattern) {
    const auto w = weights(t, rows, cols, 31, pattern == 0);
    const PackedWeight p = pack_for_decode(t, w.data(), rows, cols, nullptr, DecodeLayout::Rows16);
    for (int64_t n : {17, 33, 40, 100}) {
      const auto x = random_x(n, cols, static_cast<uint32_t>(n));
      const size_t size = static_cast<size_t>(n * rows);
      std::vector<float> ref(size, NAN), vnni(size, NAN), amx(size, NAN);
      matmul(pool1, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        INFO(name(t, rows, cols, n, static_cast<size_t>(pool->size())) << (pattern ? " random bytes" : " valid blocks"));
        matmul(*pool, CpuIsa::Avx512, p, x.data(), n, vnni.data());
        detail::matmul_amx_level(*pool, tiles, t, p.bytes.get(), true, rows, cols, x.data(), n, amx.data());
        require_same_bits(ref, vnni, "avx512 packed vs scalar");
        require_same_bits(ref, amx, "amx packed vs scalar");
      }
    }
  }
}

}  // namespace

TEST_CASE("AMX tile emulator: dot-product signedness, accumulation, wrap-around and faults") {
  detail::TileConfig c;
  c.palette = 1;
  c.rows[0] = 1, c.colsb[0] = 4;  // C: 1 x 1 int32
  c.rows[1] = 1, c.colsb[1] = 4;  // A: 1 row of 4 bytes
  c.rows[2] = 1, c.colsb[2] = 4;  // B: 1 row (K/4 = 1) of 1 column
  AmxTileEmu emu;
  CHECK_THROWS_AS(emu.zero<0>(), std::logic_error);  // before LDTILECFG
  emu.config(c);
  const uint8_t a[4] = {0xFF, 0x80, 0xFE, 3}, b[4] = {0xFF, 0x80, 0x7F, 0xF0};
  emu.load<1>(a, 4);
  emu.load<2>(b, 4);
  auto result = [&] {
    int32_t v = 0;
    emu.store<0>(&v, 4);
    return v;
  };
  // Signed a: -1 -128 -2 3; signed b: -1 -128 127 -16; unsigned a: 255 128 254 3; unsigned b:
  // 255 128 127 240.
  emu.zero<0>();
  emu.dpbsud<0, 1, 2>();
  CHECK(result() == -255 - 16384 - 254 + 720);
  emu.zero<0>();
  emu.dpbssd<0, 1, 2>();
  CHECK(result() == 1 + 16384 - 254 - 48);
  emu.zero<0>();
  emu.dpbusd<0, 1, 2>();
  CHECK(result() == -255 - 16384 + 32258 - 48);
  emu.zero<0>();
  emu.dpbuud<0, 1, 2>();
  CHECK(result() == 65025 + 16384 + 32258 + 720);
  emu.dpbuud<0, 1, 2>();  // accumulates
  CHECK(result() == 2 * (65025 + 16384 + 32258 + 720));
  const int32_t big = 2147483647 - 100;
  emu.load<0>(&big, 4);
  emu.dpbuud<0, 1, 2>();  // wraps in 32 bits
  CHECK(result() == static_cast<int32_t>(static_cast<uint32_t>(big) + 114387u));
  // A load takes rows x colsb bytes and a store writes only them.
  int32_t out[2] = {7, 7};
  emu.store<0>(out, 4);
  CHECK(out[1] == 7);
  // Faults: shapes that disagree, the same register twice, unconfigured tiles, a configuration
  // past the limits, anything after TILERELEASE.
  CHECK_THROWS_AS((emu.dpbsud<0, 1, 1>()), std::logic_error);
  CHECK_THROWS_AS((emu.dpbsud<0, 0, 2>()), std::logic_error);
  CHECK_THROWS_AS(emu.zero<3>(), std::logic_error);
  detail::TileConfig wide = c;
  wide.colsb[1] = 8;  // A has 2 dwords but B 1 row
  emu.config(wide);
  CHECK_THROWS_AS((emu.dpbsud<0, 1, 2>()), std::logic_error);
  detail::TileConfig bad = c;
  bad.colsb[1] = 68;
  CHECK_THROWS_AS(emu.config(bad), std::logic_error);
  bad = c;
  bad.rows[1] = 17;
  CHECK_THROWS_AS(emu.config(bad), std::logic_error);
  bad = c;
  bad.rows[9] = 1, bad.colsb[9] = 4;
  CHECK_THROWS_AS(emu.config(bad), std::logic_error);
  bad = c;
  bad.palette = 0;
  CHECK_THROWS_AS(emu.config(bad), std::logic_error);
  emu.config(c);
  emu.release();
  CHECK_FALSE(emu.configured());
  CHECK_THROWS_AS(emu.load<1>(a, 4), std::logic_error);
  // The kernel's own configuration is valid.
  CHECK_NOTHROW(emu.config(detail::amx_tile_config(32)));
  CHECK_NOTHROW(emu.config(detail::amx_tile_config(16)));
}

TEST_CASE("AMX prefill on the tile emulator gives the AVX-512 and scalar bits", "[avx512]") {
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512), "AVX-512 VNNI")) return;
  ThreadPool pool1(1), pool2(2), pool3(3);
  reset_amx_emu_stats();
  for (GgmlType t : kInt8Types) {
    // Odd output counts leave a partial 32-output tile; the second K cuts a 16-block chunk.
    const int64_t ks[2] = {k_quant(t) ? 256 : 96, k_quant(t) ? 768 : 640};
    for (int64_t n = 1; n <= 40; ++n)
      for (ThreadPool* pool : {&pool1, &pool2, &pool3})
        check_problem(*pool, t, n % 2 ? 67 : 70, ks[n % 2], n, n % 3 != 0, pagoda::testing::matmul_range_amx_emulated);
    for (int64_t n : {64, 100, 257})
      for (ThreadPool* pool : {&pool1, &pool3})
        check_problem(*pool, t, 131, ks[1], n, n != 100, pagoda::testing::matmul_range_amx_emulated);
  }
  // The kernel ran on the tiles (every n > 16 call), and every call released them.
  const auto stats = amx_emu_stats();
  CHECK(stats.dot_products > 0);
  CHECK(stats.calls > 0);
  CHECK(stats.unreleased == 0);
}

TEST_CASE("AMX prefill on the tile emulator reads Rows16 packed weights to the same bits", "[avx512]") {
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512), "AVX-512 VNNI")) return;
  for (GgmlType t : kRows16Types) {
    check_packed(t, pagoda::testing::matmul_range_amx_emulated);
    check_packed(t, emulated_in_halves);
  }
}

TEST_CASE("AMX prefill on the tile emulator: output ranges that cut the 32-output tiles", "[avx512]") {
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512), "AVX-512 VNNI")) return;
  ThreadPool pool1(1), pool2(2);
  for (GgmlType t : kInt8Types)
    for (int64_t n : {17, 40, 100})
      for (ThreadPool* pool : {&pool1, &pool2})
        check_problem(*pool, t, 83, k_quant(t) ? 512 : 544, n, n != 40, emulated_in_halves);
}

TEST_CASE("AMX prefill on the real tiles gives the AVX-512 and scalar bits", "[amx]") {
  if (!pagoda::testing::isa_available(CpuIsa::Amx, cpu_supports(CpuIsa::Amx),
                                      "AMX-TILE + AMX-INT8 enabled by the OS for this process (" +
                                          cpu_features_string() + ")"))
    return;
  ThreadPool pool1(1), pool3(3);
  for (GgmlType t : kInt8Types) {
    const int64_t k = k_quant(t) ? 768 : 640;
    for (int64_t n : {1, 16, 17, 31, 33, 64, 100, 257})
      for (ThreadPool* pool : {&pool1, &pool3}) check_problem(*pool, t, 131, k, n, n % 2 == 1, detail::matmul_range_amx);
  }
  for (GgmlType t : kRows16Types) check_packed(t, detail::matmul_range_amx);
  // The level's public entry point takes the same path.
  const auto w = weights(GgmlType::Q8_0, 64, 512, 3, true);
  const auto x = random_x(40, 512, 4);
  std::vector<float> got(40 * 64), want(40 * 64);
  matmul(pool3, CpuIsa::Amx, GgmlType::Q8_0, w.data(), 64, 512, x.data(), 40, got.data());
  matmul(pool3, CpuIsa::Scalar, GgmlType::Q8_0, w.data(), 64, 512, x.data(), 40, want.data());
  require_same_bits(want, got, "matmul at the amx level vs scalar");
}
