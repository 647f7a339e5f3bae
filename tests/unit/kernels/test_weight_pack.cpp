// The decode layout of weight_pack.h: packing is exactly reversible, and matmul on packed
// weights gives the bits of matmul on the GGML layout (which the scalar level defines) for odd
// row counts (a partial last group of 8 stays in the GGML layout), several super-blocks, every
// decode batch size and thread split, and the prefill sizes that read the source instead. The
// AVX-512 level's Rows16 layout the same for its six types, prefill tiles made from its groups.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"
#include "tests/support/isa.h"
#include "tests/support/quant_blocks.h"

using namespace pagoda;
using namespace pagoda::cpu;

namespace {

const GgmlType kPackable[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

// Quantized random weights: real blocks (valid scales and every bit pattern of the quants).
const GgmlType kRows16Types[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::IQ4_NL, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint8_t> w = test::quantized_normal_rows(t, rows, cols, seed);
  const size_t row_bytes = ggml_row_size(t, cols);
  // Q8_0 quantizes to [-127, 127], but a file may hold -128: one per block, the kernels' edge
  // (|q| = 128 must be read unsigned).
  if (t == GgmlType::Q8_0)
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t b = 0; b < cols / 32; ++b)
        reinterpret_cast<BlockQ8_0*>(w.data() + o * row_bytes)[b].qs[(o + b) % 32] = -128;
  return w;
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = nd(rng);
  return x;
}

std::string name(GgmlType t, int64_t rows, int64_t cols, int64_t n) {
  return std::string(ggml_type_info(t).name) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " n=" +
         std::to_string(n);
}

// n activation rows quantized as run_matmul quantizes them, with the per-call decode terms of
// type t it makes before splitting the outputs (block sums; the AVX2 corrections when asked).
struct DecodeActs {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> s;
  std::vector<float> fsum;     // at most one per half block
  std::vector<int32_t> corr;
  detail::QuantActs acts;
  DecodeActs(GgmlType t, const std::vector<float>& x, int64_t n, int64_t cols, bool corrections)
      : q(static_cast<size_t>(n * cols)), d(static_cast<size_t>(n * cols / 32)), s(static_cast<size_t>(n * cols / 16)),
        fsum(s.size()), corr(s.size()), acts{q.data(), d.data(), s.data(), cols} {
    for (int64_t i = 0; i < n; ++i)
      detail::quantize_activation_row(x.data() + i * cols, cols, q.data() + i * cols, d.data() + i * cols / 32,
                                      s.data() + i * cols / 16);
    acts.fsum_per_block = detail::min_sums_per_block(t);
    if (acts.fsum_per_block > 0) acts.fsum = fsum.data();
    acts.corr_per_block = corrections ? detail::corrections_per_block(t) : 0;
    if (acts.corr_per_block > 0) acts.corr = corr.data();
    detail::prepare_decode_terms(t, acts, n);
  }
  DecodeActs(const DecodeActs&) = delete;
  DecodeActs& operator=(const DecodeActs&) = delete;
};

}  // namespace

// Every (layout, type) pair that packs, with the rows of one group.
std::vector<std::pair<DecodeLayout, GgmlType>> packable_layouts() {
  std::vector<std::pair<DecodeLayout, GgmlType>> v;
  for (GgmlType t : kPackable) v.emplace_back(DecodeLayout::Tiles8, t);
  for (GgmlType t : kRows16Types) v.emplace_back(DecodeLayout::Rows16, t);
  return v;
}

const char* layout_name(DecodeLayout l) { return l == DecodeLayout::Rows16 ? "Rows16" : "Tiles8"; }

TEST_CASE("decode packing round-trips exactly and moves every byte") {
  for (auto [layout, t] : packable_layouts())
    for (int64_t rows : {16, 21, 24, 31, 48})
      for (int64_t cols : {256, 768}) {
        INFO(name(t, rows, cols, 0) << " " << layout_name(layout));
        const int64_t group = decode_layout_rows(layout);
        // Random bytes, not just valid blocks: every bit must go somewhere and come back.
        std::vector<uint8_t> w(ggml_row_size(t, cols) * static_cast<size_t>(rows));
        std::mt19937 rng(static_cast<uint32_t>(rows * cols));
        for (auto& b : w) b = static_cast<uint8_t>(rng());
        const PackedWeight p = pack_for_decode(t, w.data(), rows, cols, nullptr, layout);
        REQUIRE(p.size == w.size());
        REQUIRE(p.source == w.data());
        REQUIRE(p.layout == layout);
        // The full groups are re-laid (a layout that equals the source would test nothing);
        // the rows past them are copied as they are.
        const size_t full = ggml_row_size(t, cols) * static_cast<size_t>(rows / group * group);
        CHECK(std::memcmp(p.bytes.get(), w.data(), full) != 0);
        CHECK(std::memcmp(p.bytes.get() + full, w.data() + full, w.size() - full) == 0);
        ThreadPool pool(3);  // packing spread over threads gives the same bytes
        const PackedWeight spread = pack_for_decode(t, w.data(), rows, cols, &pool, layout);
        CHECK(std::memcmp(spread.bytes.get(), p.bytes.get(), p.size) == 0);
        std::vector<uint8_t> back(w.size(), 0xAA);
        unpack_from_decode(p, back.data());
        CHECK(back == w);
      }
}

TEST_CASE("decode packing: which types and shapes") {
  CHECK(decode_pack_supported(GgmlType::Q5_K, 8, 256));
  CHECK(decode_pack_supported(GgmlType::IQ4_XS, 2048, 5632 - 5632 % 256));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q5_K, 7, 256));     // no full group of 8 rows
  CHECK_FALSE(decode_pack_supported(GgmlType::Q5_K, 16, 288));    // not whole super-blocks
  CHECK_FALSE(decode_pack_supported(GgmlType::BF16, 16, 256));    // no decode layout
  CHECK(decode_pack_supported(GgmlType::Q8_0, 16, 512));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q8_0, 16, 96));     // Q8_0 tiles span 256 too
  CHECK_FALSE(decode_pack_useful(CpuIsa::Scalar, GgmlType::Q5_K, 16, 256));
  CHECK_FALSE(decode_pack_useful(CpuIsa::Avx512, GgmlType::Q5_K, 16, 256));
  CHECK(decode_pack_useful(CpuIsa::Avx2, GgmlType::IQ4_XS, 16, 256));
  const std::vector<uint8_t> w(ggml_row_size(GgmlType::F16, 256) * 16);
  CHECK_THROWS_AS(pack_for_decode(GgmlType::F16, w.data(), 16, 256), std::invalid_argument);
  // Rows16: Q8_0, Q4_0, IQ4_NL, Q4_K, Q6_K and IQ4_XS, groups of 16 rows, whole units (64
  // elements for the 32-element-block types, 256 for the others); the AVX-512 level's layout.
  CHECK(decode_pack_supported(GgmlType::Q8_0, 16, 64, DecodeLayout::Rows16));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q8_0, 15, 64, DecodeLayout::Rows16));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q8_0, 16, 96, DecodeLayout::Rows16));
  CHECK(decode_pack_supported(GgmlType::Q4_K, 16, 256, DecodeLayout::Rows16));
  CHECK(decode_pack_supported(GgmlType::Q6_K, 16, 768, DecodeLayout::Rows16));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q6_K, 15, 256, DecodeLayout::Rows16));
  CHECK(decode_pack_supported(GgmlType::Q4_0, 16, 64, DecodeLayout::Rows16));
  CHECK_FALSE(decode_pack_supported(GgmlType::Q4_1, 16, 256, DecodeLayout::Rows16));
  CHECK_FALSE(decode_pack_supported(GgmlType::IQ4_XS, 16, 64, DecodeLayout::Rows16));
  CHECK(decode_layout_for(CpuIsa::Avx512, GgmlType::Q8_0, 2048, 2048) == DecodeLayout::Rows16);
  CHECK(decode_layout_for(CpuIsa::Avx512, GgmlType::Q4_K, 2048, 2048) == DecodeLayout::Rows16);
  CHECK(decode_layout_for(CpuIsa::Avx512, GgmlType::Q6_K, 2048, 5632) == DecodeLayout::Rows16);
  CHECK(decode_layout_for(CpuIsa::Avx2, GgmlType::Q8_0, 2048, 2048) == DecodeLayout::Tiles8);
  CHECK(decode_layout_for(CpuIsa::Amx, GgmlType::Q8_0, 2048, 2048) == DecodeLayout::Rows16);  // Amx reads AVX-512's layout
  CHECK_FALSE(decode_layout_for(CpuIsa::Avx512, GgmlType::Q5_K, 2048, 2048).has_value());
  const std::vector<uint8_t> q(ggml_row_size(GgmlType::Q4_1, 256) * 16);
  CHECK_THROWS_AS(pack_for_decode(GgmlType::Q4_1, q.data(), 16, 256, nullptr, DecodeLayout::Rows16), std::invalid_argument);
}

TEST_CASE("matmul on packed weights gives the GGML layout's bits at every level, n and split") {
  ThreadPool pool1(1), pool2(2), pool3(3);
  std::vector<CpuIsa> isas;
  for (CpuIsa i : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Amx})
    if (cpu_supports(i)) isas.push_back(i);
  for (auto [layout, t] : packable_layouts())
    for (int64_t rows : {16, 21, 40, 69})
      for (int64_t cols : {256, 1280}) {
        const auto w = random_matrix(t, rows, cols, static_cast<uint32_t>(rows + cols));
        const PackedWeight p = pack_for_decode(t, w.data(), rows, cols, nullptr, layout);
        // 9 and 16: several passes of the decode kernels' rows; 17 and 40: the prefill tile,
        // made from the packed groups.
        for (int64_t n : {1, 2, 3, 9, 16, 17, 40}) {
          const auto x = random_x(n, cols, static_cast<uint32_t>(n));
          std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size());
          matmul(pool2, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
          for (CpuIsa isa : isas)
            for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
              INFO(name(t, rows, cols, n) << " " << layout_name(layout) << " " << cpu_isa_name(isa) << " threads "
                                          << pool->size());
              std::fill(got.begin(), got.end(), -1.f);
              matmul(*pool, isa, p, x.data(), n, got.data());
              REQUIRE(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
            }
        }
      }
}

TEST_CASE("matmul on packed weights with every bit pattern of quants and sub-block scales", "[avx2]") {
  if (!pagoda::testing::isa_available(CpuIsa::Avx2, cpu_supports(CpuIsa::Avx2), "AVX2 + FMA + F16C")) return;
  ThreadPool pool(2);
  const int64_t rows = 24, cols = 512;
  for (GgmlType t : kPackable) {
    const auto w = test::random_blocks(t, rows, cols, 12, fp32_to_fp16(0.01f));
    const PackedWeight p = pack_for_decode(t, w.data(), rows, cols);
    for (int64_t n : {1, 2, 3, 20}) {  // 20: the prefill tile
      const auto x = random_x(n, cols, static_cast<uint32_t>(n));
      std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size());
      matmul(pool, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
      matmul(pool, CpuIsa::Avx2, p, x.data(), n, got.data());
      INFO(name(t, rows, cols, n));
      CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("packed decode kernel: output ranges that cut groups of 8 store only their part", "[avx2]") {
  // The dispatcher splits outputs by 8 today; a range inside a group must still be right.
  if (!pagoda::testing::isa_available(CpuIsa::Avx2, cpu_supports(CpuIsa::Avx2), "AVX2 + FMA + F16C")) return;
  for (GgmlType t : kPackable) {
    const int64_t rows = 29, cols = 512, n = 3;
    const auto w = random_matrix(t, rows, cols, 5);
    const PackedWeight p = pack_for_decode(t, w.data(), rows, cols);
    const auto x = random_x(n, cols, 6);
    const DecodeActs xa(t, x, n, cols, /*corrections=*/true);
    std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size(), -1.f);
    detail::MatmulArgs a{t, p.bytes.get(), ggml_row_size(t, cols), rows, cols, nullptr, xa.acts, n, ref.data()};
    a.packed = true;
    detail::matmul_packed_avx2(a, 0, rows);
    a.out = got.data();
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 3}, {3, 11}, {11, 12}, {12, 26}, {26, 29}}) detail::matmul_packed_avx2(a, b, e);
    INFO(ggml_type_info(t).name);
    CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    // And the whole range agrees with matmul on the GGML bytes.
    std::vector<float> ggml(ref.size());
    ThreadPool pool(1);
    matmul(pool, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ggml.data());
    CHECK(std::memcmp(ggml.data(), ref.data(), ref.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("Rows16 decode kernel: output ranges that cut groups of 16 store only their part", "[avx512]") {
  // The dispatcher splits outputs by 32 today; a range inside a group must still be right.
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512), "AVX-512 VNNI")) return;
  for (GgmlType t : kRows16Types) {
    const int64_t rows = 53, cols = 768;  // 3 full groups and 5 GGML rows; 3 K-quant super-blocks
    const auto w = random_matrix(t, rows, cols, 9);
    const PackedWeight p = pack_for_decode(t, w.data(), rows, cols, nullptr, DecodeLayout::Rows16);
    for (int64_t n : {1, 5, 12, 16}) {
      const auto x = random_x(n, cols, static_cast<uint32_t>(n + 1));
      const DecodeActs xa(t, x, n, cols, /*corrections=*/false);  // AVX-512 kernels read no corrections
      std::vector<float> got(static_cast<size_t>(n * rows), -1.f);
      detail::MatmulArgs a{t, p.bytes.get(), ggml_row_size(t, cols), rows, cols, nullptr, xa.acts, n, got.data()};
      a.packed = true;
      std::vector<uint8_t> panel(static_cast<size_t>(detail::rows16_decode_panel_bytes(n, cols)));
      detail::pack_rows16_decode_panel(t, a.acts, n, panel.data());
      a.decode_panel = panel.data();
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 3}, {3, 19}, {19, 20}, {20, 45}, {45, 50}, {50, 53}})
        detail::matmul_few_rows_avx512(a, b, e);
      std::vector<float> ref(got.size());
      ThreadPool pool(1);
      matmul(pool, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
      INFO(ggml_type_info(t).name << " n=" << n);
      CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("Rows16 matmul gives the scalar bits at every batch size 1..40 and thread split", "[avx512]") {
  // n <= 16: the decode kernel in passes of every size; n > 16: the prefill tile made from the
  // packed groups. Valid blocks (random_matrix) and random bytes with small fp16 scales
  // (random_blocks: every bit pattern of quants and sub-block scales).
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512), "AVX-512 VNNI")) return;
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t rows = 40, cols = 512;  // 2 groups of 16 and 8 GGML rows
  for (GgmlType t : kRows16Types)
    for (int pattern = 0; pattern < 2; ++pattern) {
      const auto w = pattern == 0 ? random_matrix(t, rows, cols, 21) : test::random_blocks(t, rows, cols, 22, fp32_to_fp16(0.01f));
      const PackedWeight p = pack_for_decode(t, w.data(), rows, cols, nullptr, DecodeLayout::Rows16);
      for (int64_t n = 1; n <= 40; ++n) {
        const auto x = random_x(n, cols, static_cast<uint32_t>(100 + n));
        std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size());
        matmul(pool1, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
        for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
          INFO(name(t, rows, cols, n) << (pattern ? " random bytes" : " valid blocks") << " threads " << pool->size());
          std::fill(got.begin(), got.end(), -1.f);
          matmul(*pool, CpuIsa::Avx512, p, x.data(), n, got.data());
          REQUIRE(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
        }
      }
    }
}
