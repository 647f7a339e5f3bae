// matmul: every weight type at every ISA level this CPU has, odd shapes, against a plain
// double-precision reference on dequantized weights; bit-exact batch and thread invariance.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/weight_pack.h"
#include "tests/support/quant_blocks.h"
#include "tests/support/isa.h"

using namespace pagoda;
using namespace pagoda::cpu;

namespace {

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                           GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,   GgmlType::IQ4_XS};

bool quantized(GgmlType t) { return ggml_type_info(t).block_size > 1; }

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> v;
  for (CpuIsa i : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Amx})
    if (cpu_supports(i)) v.push_back(i);
  return v;
}

struct Problem {
  GgmlType type;
  int64_t out, in, n;
  std::vector<uint8_t> w;    // GGML-typed weights
  std::vector<float> wf;     // the same weights dequantized
  std::vector<float> x;
};

Problem make_problem(GgmlType t, int64_t out, int64_t in, int64_t n, uint32_t seed) {
  Problem p{t, out, in, n, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t row = ggml_row_size(t, in);
  p.w.resize(row * static_cast<size_t>(out));
  p.wf.resize(static_cast<size_t>(out * in));
  std::vector<float> tmp(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    for (auto& v : tmp) v = nd(rng);
    quantize_row(t, tmp.data(), p.w.data() + o * row, in);
    dequantize_row(t, p.w.data() + o * row, p.wf.data() + o * in, in);
  }
  p.x.resize(static_cast<size_t>(n * in));
  for (auto& v : p.x) v = nd(rng);
  return p;
}

std::vector<float> run(ThreadPool& pool, CpuIsa isa, const Problem& p, int64_t n, const float* x) {
  std::vector<float> out(static_cast<size_t>(n * p.out), NAN);
  matmul(pool, isa, p.type, p.w.data(), p.out, p.in, x, n, out.data());
  return out;
}

// Checks out against sum_k wf[o][k] * x[i][k] in double. Tolerance per (i, o), justified:
//  * quantized types: x is quantized per 32-block to int8 with step amax_b/127, so each x
//    element moves by at most amax_b/254; the result can move by sum_k |w_k| * amax_b(k)/254.
//    We allow that bound (times 1.01) plus float accumulation rounding below.
//  * float rounding (all types): one fma or add per element/block, each with relative error
//    2^-24 of a partial sum bounded by sum_k |w_k x_k|; 4 * k * 2^-24 * sum|w x| covers it
//    comfortably for these k (the chains are at most k long; horizontal sums add log2 steps).
//  * BF16 weights on the vdpbf16ps path (bf16_dot): x is rounded to bf16 (relative error at most
//    2^-9 per element, the products are then exact), so the result can move by 2^-9 * sum|w x|.
bool bf16_dot(GgmlType t, CpuIsa isa) {
  return t == GgmlType::BF16 && vector_isa(isa) == CpuIsa::Avx512 && bf16_dot_products();
}

void check_against_reference(const Problem& p, const std::vector<float>& out, const std::string& what,
                             bool x_in_bf16 = false) {
  for (int64_t i = 0; i < p.n; ++i) {
    const float* x = p.x.data() + i * p.in;
    std::vector<double> blk_amax(static_cast<size_t>((p.in + 31) / 32), 0.0);
    for (int64_t k = 0; k < p.in; ++k) blk_amax[k / 32] = std::max(blk_amax[k / 32], std::fabs(double(x[k])));
    for (int64_t o = 0; o < p.out; ++o) {
      const float* w = p.wf.data() + o * p.in;
      double ref = 0, abs_sum = 0, quant_bound = 0;
      for (int64_t k = 0; k < p.in; ++k) {
        ref += double(w[k]) * x[k];
        abs_sum += std::fabs(double(w[k]) * x[k]);
        quant_bound += std::fabs(double(w[k])) * blk_amax[k / 32] / 254.0;
      }
      double tol = 4.0 * p.in * std::ldexp(1.0, -24) * abs_sum + 1e-6;
      if (quantized(p.type)) tol += quant_bound * 1.01;
      if (x_in_bf16) tol += std::ldexp(1.0, -9) * abs_sum;
      const double got = out[i * p.out + o];
      if (!(std::fabs(got - ref) <= tol)) {
        FAIL(what << " row " << i << " out " << o << ": got " << got << " want " << ref << " tol " << tol);
      }
    }
  }
}

std::string name(GgmlType t, CpuIsa isa, int64_t out, int64_t in, int64_t n) {
  return std::string(ggml_type_info(t).name) + "/" + cpu_isa_name(isa) + " out=" + std::to_string(out) +
         " in=" + std::to_string(in) + " n=" + std::to_string(n);
}

}  // namespace

TEST_CASE("matmul matches the reference for every type, ISA level and odd shapes") {
  ThreadPool pool(2);
  INFO(cpu_features_string());
  for (GgmlType t : kTypes) {
    const int64_t bs = ggml_type_info(t).block_size;
    // in: one block (or a few odd elements for float types) and a length crossing the SIMD
    // kernels' 512-element K chunks with a partial last chunk.
    const std::vector<int64_t> ins = bs == 1 ? std::vector<int64_t>{67, 1040} : std::vector<int64_t>{std::max<int64_t>(bs, 64), 1280};
    for (int64_t in : ins)
      for (int64_t out : {37, 70})
        for (int64_t n : {1, 3, 17}) {
          const Problem p = make_problem(t, out, in, n, static_cast<uint32_t>(out * 1000 + in + n));
          for (CpuIsa isa : isas())
            check_against_reference(p, run(pool, isa, p, n, p.x.data()), name(t, isa, out, in, n), bf16_dot(t, isa));
        }
  }
}

TEST_CASE("BF16 weights on the vdpbf16ps path: exact products of bf16-rounded activations", "[avx512]") {
  if (!pagoda::testing::isa_available(CpuIsa::Avx512, cpu_supports(CpuIsa::Avx512) && cpu_features().avx512_bf16,
                                      "AVX-512 with VNNI and BF16 (vdpbf16ps)"))
    return;
  const bool was_on = bf16_dot_products();
  set_bf16_dot_products(true);
  struct Restore {
    bool on;
    ~Restore() { set_bf16_dot_products(on); }
  } restore{was_on};
  ThreadPool pool(2);
  for (int64_t in : {67, 1040, 2048})
    for (int64_t n : {1, 5, 130}) {
      const Problem p = make_problem(GgmlType::BF16, 37, in, n, static_cast<uint32_t>(in + n));
      const auto got = run(pool, CpuIsa::Avx512, p, n, p.x.data());
      // The reference with x rounded as the kernel rounds it: only float summation error is left.
      Problem rounded = p;
      for (auto& v : rounded.x) v = bf16_to_fp32(fp32_to_bf16(v));
      check_against_reference(rounded, got, name(p.type, CpuIsa::Avx512, p.out, in, n));
      // Batch invariance: each row alone (decode) gives the same bits.
      for (int64_t i : {int64_t{0}, n - 1}) {
        const auto one = run(pool, CpuIsa::Avx512, p, 1, p.x.data() + i * in);
        REQUIRE(std::memcmp(one.data(), got.data() + i * p.out, p.out * 4) == 0);
      }
    }
}

TEST_CASE("quantized types give bit-identical results at every ISA level") {
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    if (!quantized(t)) continue;
    const Problem p = make_problem(t, 70, 1280, 5, 7);
    const auto ref = run(pool, CpuIsa::Scalar, p, p.n, p.x.data());
    for (CpuIsa isa : isas()) {
      const auto got = run(pool, isa, p, p.n, p.x.data());
      INFO(name(t, isa, p.out, p.in, p.n));
      CHECK(std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("an odd number of 32-element blocks: the decode kernels' last unpaired block") {
  // The AVX2 decode kernel takes Q4_0's blocks two per reduction; 3 and 33 blocks leave the last
  // one alone. Checked for every 32-element type, decode (n = 1, 2) and prefill-sized n.
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    if (ggml_type_info(t).block_size != 32) continue;
    for (int64_t in : {96, 1056})
      for (int64_t n : {1, 2, 17}) {
        const Problem p = make_problem(t, 21, in, n, static_cast<uint32_t>(in + n));
        const auto ref = run(pool, CpuIsa::Scalar, p, n, p.x.data());
        for (CpuIsa isa : isas()) {
          INFO(name(t, isa, p.out, in, n));
          CHECK(std::memcmp(run(pool, isa, p, n, p.x.data()).data(), ref.data(), ref.size() * sizeof(float)) == 0);
        }
      }
  }
}

TEST_CASE("batch and thread invariance: a row's result is bit-identical whatever n and threads") {
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (GgmlType t : kTypes) {
    const int64_t in = ggml_type_info(t).block_size == 256 ? 768 : 576;
    const Problem p = make_problem(t, 75, in, 17, 99);
    for (CpuIsa isa : isas()) {
      INFO(name(t, isa, p.out, p.in, p.n));
      const auto all = run(pool2, isa, p, 17, p.x.data());
      CHECK(std::memcmp(run(pool1, isa, p, 17, p.x.data()).data(), all.data(), all.size() * 4) == 0);
      CHECK(std::memcmp(run(pool3, isa, p, 17, p.x.data()).data(), all.data(), all.size() * 4) == 0);
      for (int64_t i = 0; i < 17; ++i) {
        const auto one = run(pool2, isa, p, 1, p.x.data() + i * in);
        REQUIRE(std::memcmp(one.data(), all.data() + i * p.out, p.out * 4) == 0);
      }
      // A row in the middle of a differently sized batch (n = 6 starting at row 5).
      const auto mid = run(pool1, isa, p, 6, p.x.data() + 5 * in);
      CHECK(std::memcmp(mid.data(), all.data() + 5 * p.out, 6 * p.out * 4) == 0);
    }
  }
}

TEST_CASE("matmul_same_x: one job over several matrices gives each matmul's bits") {
  // Matrices of 75, 0, 16 and 300 outputs: with 2 threads a decode job's chunks span matrices
  // (7 tasks a chunk of 14 at Q8_0), and the empty one sits between two others.
  ThreadPool pool1(1), pool2(2), pool3(3);
  const int64_t outs[] = {75, 0, 16, 300};
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS}) {
    const int64_t in = ggml_type_info(t).block_size == 256 ? 768 : 576;
    std::vector<Problem> ps;
    for (int j = 0; j < 4; ++j) ps.push_back(make_problem(t, outs[j], in, 40, 7 + j));
    const std::vector<float>& x = ps[0].x;
    for (CpuIsa isa : isas())
      for (ThreadPool* pool : {&pool1, &pool2, &pool3})
        for (int64_t n : {1, 5, 17, 40}) {
          INFO(name(t, isa, 0, in, n) << " threads=" << pool->size());
          std::vector<std::vector<float>> got(4);
          std::vector<SameXMatrix> m;
          for (int j = 0; j < 4; ++j) {
            got[j].assign(static_cast<size_t>(n * outs[j]), NAN);
            m.push_back({ps[j].w.data(), outs[j], got[j].data()});
          }
          matmul_same_x(*pool, isa, t, m.data(), 4, in, x.data(), n);
          for (int j = 0; j < 4; ++j) {
            CHECK(std::memcmp(got[j].data(), run(*pool, isa, ps[j], n, x.data()).data(), got[j].size() * 4) == 0);
          }
        }
  }
}

TEST_CASE("matmul_same_x on decode-layout copies gives each matmul's bits; mixed copies are refused") {
  ThreadPool pool(2);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t in = 768;
    const int64_t outs[] = {48, 16, 304};
    for (CpuIsa isa : isas()) {
      const auto layout = decode_layout_for(isa, t, 16, in);
      if (!layout) continue;
      std::vector<Problem> ps;
      std::vector<PackedWeight> packed;
      for (int j = 0; j < 3; ++j) {
        ps.push_back(make_problem(t, outs[j], in, 20, 31 + j));
        packed.push_back(pack_for_decode(t, ps[j].w.data(), outs[j], in, nullptr, *layout));
      }
      const PackedWeight* w[] = {&packed[0], &packed[1], &packed[2]};
      for (int64_t n : {1, 3, 16, 20}) {
        INFO(name(t, isa, 0, in, n));
        std::vector<std::vector<float>> got(3), want(3);
        float* out[3];
        for (int j = 0; j < 3; ++j) {
          got[j].assign(static_cast<size_t>(n * outs[j]), NAN);
          want[j].assign(static_cast<size_t>(n * outs[j]), NAN);
          out[j] = got[j].data();
          matmul(pool, isa, packed[j], ps[0].x.data(), n, want[j].data());
        }
        matmul_same_x(pool, isa, w, out, 3, ps[0].x.data(), n);
        for (int j = 0; j < 3; ++j) CHECK(std::memcmp(got[j].data(), want[j].data(), got[j].size() * 4) == 0);
      }
    }
  }
  const Problem a = make_problem(GgmlType::Q8_0, 16, 256, 1, 1), b = make_problem(GgmlType::Q4_0, 16, 256, 1, 2);
  const PackedWeight pa = pack_for_decode(a.type, a.w.data(), 16, 256, nullptr, DecodeLayout::Tiles8);
  const PackedWeight pb = pack_for_decode(b.type, b.w.data(), 16, 256, nullptr, DecodeLayout::Tiles8);
  const PackedWeight* w[] = {&pa, &pb};
  std::vector<float> o0(16), o1(16);
  float* out[] = {o0.data(), o1.data()};
  CHECK_THROWS_AS(matmul_same_x(pool, CpuIsa::Scalar, w, out, 2, a.x.data(), 1), std::invalid_argument);
}

TEST_CASE("prefill rows split into cache-sized blocks give the decode path's bits") {
  // in = 8192, 301 rows: the AVX-512 prefill kernel's row blocks hold at most 4 MiB of activation
  // panels (16 KiB a row here), the AVX2 one's fit in half of L2 (on any L2 up to 4 MiB), so
  // both cross blocks, and a partial last row group.
  ThreadPool pool(2);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const Problem p = make_problem(t, 40, 8192, 301, 11);
    for (CpuIsa isa : isas()) {
      INFO(name(t, isa, p.out, p.in, p.n));
      const auto all = run(pool, isa, p, p.n, p.x.data());
      for (int64_t i : {0, 63, 64, 100, 129, 150, 151, 152, 300}) {
        const auto one = run(pool, isa, p, 1, p.x.data() + i * p.in);
        REQUIRE(std::memcmp(one.data(), all.data() + i * p.out, p.out * 4) == 0);
      }
    }
  }
}

TEST_CASE("AVX2 prefill tiles: every row tail, L2 row blocks and 16-bit partial sums match the scalar bits",
          "[avx2]") {
  // The AVX2 tile kernel takes rows 4 at a time in blocks sized from the L2 (64 rows at in =
  // 8192 on L2s up to 1 MiB; a whole batch of these sizes at in = 512), adds several groups'
  // 16-bit products before widening for the small-u types (8 groups for 4-bit, 4 for 5-bit, 2
  // for Q6_K, per half for Q3_K/Q2_K) and forms Q8_0 / IQ4 products from |q| and x with q's
  // sign. n = 18..21 end with 2, 3, 0 and 1 rows; n = 131 at in = 8192 crosses block
  // boundaries and ends a block with 3.
  if (!pagoda::testing::isa_available(CpuIsa::Avx2, cpu_supports(CpuIsa::Avx2), "AVX2 + FMA + F16C")) return;
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    if (!quantized(t)) continue;
    for (int64_t in : {512, 8192}) {
      for (int64_t n : in == 512 ? std::vector<int64_t>{18, 19, 20, 21} : std::vector<int64_t>{131}) {
        const Problem p = make_problem(t, 19, in, n, static_cast<uint32_t>(in + n));
        INFO(name(t, CpuIsa::Avx2, p.out, in, n));
        const auto ref = run(pool, CpuIsa::Scalar, p, n, p.x.data());
        CHECK(std::memcmp(run(pool, CpuIsa::Avx2, p, n, p.x.data()).data(), ref.data(), ref.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {

// Weights whose every decoded byte is the type's largest (or, for Q8_0, q = -128): all bits of
// the quant fields set, scales small and finite.
std::vector<uint8_t> extreme_weights(GgmlType t, int64_t out, int64_t in) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  std::vector<uint8_t> w(ggml_row_size(t, in) * static_cast<size_t>(out), t == GgmlType::Q8_0 ? 0x80 : 0xFF);
  const uint16_t small = fp32_to_fp16(0.01f);
  for (size_t b = 0; b < w.size() / info.type_size; ++b) test::set_block_halves(t, &w[b * info.type_size], small);
  return w;
}

// matmul of w (out x in, type t) on x (n rows) at every ISA level this CPU has gives the scalar
// level's bits.
void check_isas_match_scalar(ThreadPool& pool, GgmlType t, const std::vector<uint8_t>& w, int64_t out, int64_t in,
                             const std::vector<float>& x, int64_t n) {
  std::vector<float> ref(static_cast<size_t>(n * out)), got(ref.size());
  matmul(pool, CpuIsa::Scalar, t, w.data(), out, in, x.data(), n, ref.data());
  for (CpuIsa isa : isas()) {
    INFO(name(t, isa, out, in, n));
    matmul(pool, isa, t, w.data(), out, in, x.data(), n, got.data());
    CHECK(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("largest weights times activations of +-127: no 16-bit sum overflows") {
  // Every activation quantizes to 127 (or -127 in the second row): the largest pair products
  // vpmaddubsw can see, summed over the most groups the AVX2 tile adds in 16 bits.
  ThreadPool pool(2);
  const int64_t in = 512, out = 16, n = 20;
  for (GgmlType t : kTypes) {
    if (!quantized(t)) continue;
    const auto w = extreme_weights(t, out, in);
    std::vector<float> x(static_cast<size_t>(n * in), 1.f);
    for (int64_t k = 0; k < in; ++k) x[in + k] = -1.f;
    check_isas_match_scalar(pool, t, w, out, in, x, n);
  }
}

TEST_CASE("every bit pattern of quants and sub-block scales: the decode kernels give the scalar bits") {
  // Quantized test matrices hold the scale values a quantizer picks; random bytes hold all of
  // them (Q3_K's and IQ4_XS's top scale bits, Q2_K's mins of 15, Q8_0's -128 ...).
  ThreadPool pool(2);
  const int64_t out = 24, in = 512;
  for (GgmlType t : kTypes) {
    if (!quantized(t)) continue;
    const auto w = test::random_blocks(t, out, in, 11, fp32_to_fp16(0.01f));
    for (int64_t n : {1, 2, 3, 20}) {
      std::vector<float> x(static_cast<size_t>(n * in));
      std::mt19937 rng(static_cast<uint32_t>(n));
      std::normal_distribution<float> nd(0.f, 1.f);
      for (auto& v : x) v = nd(rng);
      check_isas_match_scalar(pool, t, w, out, in, x, n);
    }
  }
}

TEST_CASE("bad arguments are refused") {
  ThreadPool pool(1);
  float x[64] = {}, out[4];
  uint8_t w[256] = {};
  CHECK_THROWS_AS(matmul(pool, GgmlType::Q8_0, w, 1, 48, x, 1, out), std::invalid_argument);
  CHECK_THROWS_AS(matmul(pool, GgmlType::Q8_1, w, 1, 32, x, 1, out), std::invalid_argument);
  CHECK_THROWS_AS(matmul(pool, GgmlType::Q4_K, w, 1, 32, x, 1, out), std::invalid_argument);
  matmul(pool, GgmlType::F32, w, 1, 16, x, 0, out);  // n = 0 is a no-op
}

TEST_CASE("ISA levels: names round-trip, the scalar level always runs") {
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Amx}) {
    CpuIsa parsed = CpuIsa::Scalar;
    REQUIRE(parse_cpu_isa(cpu_isa_name(isa), parsed));
    CHECK(parsed == isa);
  }
  CpuIsa unchanged = CpuIsa::Avx2;
  CHECK_FALSE(parse_cpu_isa("sse9", unchanged));
  CHECK(unchanged == CpuIsa::Avx2);
  CHECK(cpu_supports(CpuIsa::Scalar));
  CHECK(cpu_supports(default_cpu_isa()));
  CHECK(static_cast<int>(default_cpu_isa()) <= static_cast<int>(best_cpu_isa()));
  // Amx is the Avx512 level plus tiles: reached only with every piece of AMX, its vector kernels
  // are Avx512's.
  const CpuFeatures& f = cpu_features();
  const bool tiles = f.amx_tile && f.amx_int8 && f.os_amx && f.amx_permitted;
  CHECK(cpu_supports(CpuIsa::Amx) == (cpu_supports(CpuIsa::Avx512) && tiles));
  CHECK(vector_isa(CpuIsa::Amx) == CpuIsa::Avx512);
  CHECK(vector_isa(CpuIsa::Avx512) == CpuIsa::Avx512);
  CHECK(vector_isa(CpuIsa::Avx2) == CpuIsa::Avx2);
  // The OS's permission is only asked for where the CPU and the OS have the tile state.
  if (!(f.amx_tile && f.os_amx)) CHECK_FALSE(f.amx_permitted);
}

TEST_CASE("SIMD activation quantization is bit-identical to the scalar definition") {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  const int64_t k = 1024;
  std::vector<float> x(k);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 64; ++i) x[i] = 0.f;         // an all-zero block (scale 0)
  x[100] = 1e-30f, x[200] = -65504.f, x[300] = 0.5f;  // tiny, large, exact ties after scaling
  for (int i = 0; i < 32; ++i) x[640 + i] = (i - 16) * 0.5f;  // a block of many exact ties
  std::vector<int8_t> q1(k);
  std::vector<float> d1(k / 32);
  std::vector<int16_t> s1(k / 16);
  pagoda::cpu::detail::quantize_activation_row(x.data(), k, q1.data(), d1.data(), s1.data());
  using Quantizer = void (*)(const float*, int64_t, int8_t*, float*, int16_t*);
  const std::pair<CpuIsa, Quantizer> simd[] = {{CpuIsa::Avx2, pagoda::cpu::detail::quantize_activation_row_avx2},
                                               {CpuIsa::Avx512, pagoda::cpu::detail::quantize_activation_row_avx512}};
  for (const auto& [isa, quantize] : simd) {
    if (!cpu_supports(isa)) continue;
    INFO(cpu_isa_name(isa));
    std::vector<int8_t> q2(k);
    std::vector<float> d2(k / 32);
    std::vector<int16_t> s2(k / 16);
    quantize(x.data(), k, q2.data(), d2.data(), s2.data());
    CHECK(q1 == q2);
    CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * 4) == 0);
    CHECK(s1 == s2);
  }
}
