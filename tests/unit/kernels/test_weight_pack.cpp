// The decode layout of weight_pack.h: packing is exactly reversible, and matmul on packed
// weights gives the bits of matmul on the GGML layout (which the scalar level defines) for odd
// row counts (a partial last group of 8 stays in the GGML layout), several super-blocks, every
// decode batch size and thread split, and the prefill sizes that read the source instead.
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
std::vector<uint8_t> random_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t row_bytes = ggml_row_size(t, cols);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(rows));
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t o = 0; o < rows; ++o) {
    for (auto& v : tmp) v = nd(rng) * (1.f + static_cast<float>(o % 5));
    quantize_row(t, tmp.data(), w.data() + o * row_bytes, cols);
    // Q8_0 quantizes to [-127, 127], but a file may hold -128: one per block, the kernels' edge
    // (|q| = 128 must be read unsigned).
    if (t == GgmlType::Q8_0)
      for (int64_t b = 0; b < cols / 32; ++b)
        reinterpret_cast<BlockQ8_0*>(w.data() + o * row_bytes)[b].qs[(o + b) % 32] = -128;
  }
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

}  // namespace

TEST_CASE("decode packing round-trips exactly and moves every byte") {
  for (GgmlType t : kPackable)
    for (int64_t rows : {8, 13, 24, 31})
      for (int64_t cols : {256, 768}) {
        INFO(name(t, rows, cols, 0));
        // Random bytes, not just valid blocks: every bit must go somewhere and come back.
        std::vector<uint8_t> w(ggml_row_size(t, cols) * static_cast<size_t>(rows));
        std::mt19937 rng(static_cast<uint32_t>(rows * cols));
        for (auto& b : w) b = static_cast<uint8_t>(rng());
        const PackedWeight p = pack_for_decode(t, w.data(), rows, cols);
        REQUIRE(p.size == w.size());
        REQUIRE(p.source == w.data());
        // The full groups are re-laid (a layout that equals the source would test nothing);
        // the rows past them are copied as they are.
        const size_t full = ggml_row_size(t, cols) * static_cast<size_t>(rows / 8 * 8);
        CHECK(std::memcmp(p.bytes.get(), w.data(), full) != 0);
        CHECK(std::memcmp(p.bytes.get() + full, w.data() + full, w.size() - full) == 0);
        ThreadPool pool(3);  // packing spread over threads gives the same bytes
        const PackedWeight spread = pack_for_decode(t, w.data(), rows, cols, &pool);
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
}

TEST_CASE("matmul on packed weights gives the GGML layout's bits at every level, n and split") {
  ThreadPool pool1(1), pool2(2), pool3(3);
  std::vector<CpuIsa> isas;
  for (CpuIsa i : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512})
    if (cpu_supports(i)) isas.push_back(i);
  for (GgmlType t : kPackable)
    for (int64_t rows : {8, 21, 40, 69})
      for (int64_t cols : {256, 1280}) {
        const auto w = random_matrix(t, rows, cols, static_cast<uint32_t>(rows + cols));
        const PackedWeight p = pack_for_decode(t, w.data(), rows, cols);
        for (int64_t n : {1, 2, 3, 16, 17, 40}) {  // 17 and 40: the prefill tile, unpacking the tiles
          const auto x = random_x(n, cols, static_cast<uint32_t>(n));
          std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size());
          matmul(pool2, CpuIsa::Scalar, t, w.data(), rows, cols, x.data(), n, ref.data());
          for (CpuIsa isa : isas)
            for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
              INFO(name(t, rows, cols, n) << " " << cpu_isa_name(isa) << " threads " << pool->size());
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
    std::vector<int8_t> q(static_cast<size_t>(n * cols));
    std::vector<float> d(static_cast<size_t>(n * cols / 32));
    std::vector<int16_t> s(static_cast<size_t>(n * cols / 16));
    for (int64_t i = 0; i < n; ++i)
      detail::quantize_activation_row(x.data() + i * cols, cols, q.data() + i * cols, d.data() + i * cols / 32,
                                      s.data() + i * cols / 16);
    std::vector<float> ref(static_cast<size_t>(n * rows)), got(ref.size(), -1.f);
    detail::MatmulArgs a{t, p.bytes.get(), ggml_row_size(t, cols), rows, cols, nullptr, {q.data(), d.data(), s.data(), cols}, n, ref.data()};
    a.packed = true;
    // The per-call terms run_matmul makes before splitting the outputs.
    std::vector<float> fsum(s.size());    // at most one per half
    std::vector<int32_t> corr(s.size());
    a.acts.fsum_per_block = detail::min_sums_per_block(t);
    if (a.acts.fsum_per_block > 0) a.acts.fsum = fsum.data();
    a.acts.corr_per_block = detail::corrections_per_block(t);
    if (a.acts.corr_per_block > 0) a.acts.corr = corr.data();
    detail::prepare_decode_terms(t, a.acts, n);
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
