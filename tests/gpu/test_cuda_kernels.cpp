// CUDA kernels called through their launchers (kernels/cuda/ops.h) on raw device memory:
// weight dequantization and conversion to bf16 against kernels/cpu/quants.h, and GPU sampling
// (argmax, temperature, top-k, top-p, min-p, Philox draws) against a host implementation of
// the same rule. The Philox known-answer test runs on the host, with or without a device.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/quants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/philox.h"
#include "tests/gpu/cuda_test_util.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

// A device buffer freed at scope exit.
struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuf() { cudaFree(p); }
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

template <class T>
void to_device(DeviceBuf& d, const std::vector<T>& h) {
  CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <class T>
std::vector<T> from_device(const DeviceBuf& d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The sampling rule of kernels/cuda/sample.cu, on the host. Returns the token, and in
// *ambiguous whether float rounding could reasonably flip the result (draw or top-p target
// within a hair of a boundary), in which case a different GPU answer is not an error.
int reference_sample(const std::vector<float>& x, const cuda::SampleParams& p, bool* ambiguous) {
  const int vocab = static_cast<int>(x.size());
  *ambiguous = false;
  const int amax = static_cast<int>(std::max_element(x.begin(), x.end()) - x.begin());
  if (p.temperature <= 0.0f) return amax;
  const float inv_t = 1.0f / p.temperature, shift = x[static_cast<size_t>(amax)] * inv_t;
  std::vector<float> e(x.size());
  for (int j = 0; j < vocab; ++j) e[static_cast<size_t>(j)] = std::exp(x[static_cast<size_t>(j)] * inv_t - shift);
  std::vector<float> sorted = e;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  float thr = 0.0f;
  if (p.top_k > 0 && p.top_k < vocab) thr = sorted[static_cast<size_t>(p.top_k - 1)];
  auto mass = [&](float t) {
    double s = 0;
    for (float v : e) if (v >= t) s += v;
    return s;
  };
  if (p.top_p < 1.0f) {
    const double target = p.top_p * mass(thr);
    for (float v : sorted) {  // descending: the first value whose mass reaches the target
      if (v < thr) break;
      const double m = mass(v);
      if (std::fabs(m - target) < 1e-5 * target) *ambiguous = true;
      if (m >= target) {
        thr = std::max(thr, v);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) thr = std::max(thr, std::min(p.min_p, 1.0f));
  const double total = mass(thr);
  const double target = static_cast<double>(cuda::philox_uniform(p.seed, p.counter)) * total;
  double run = 0;
  int last = amax;
  for (int j = 0; j < vocab; ++j) {
    const float v = e[static_cast<size_t>(j)];
    if (v < thr) continue;
    last = j;
    if (std::fabs(run + v - target) < 1e-5 * total || std::fabs(run - target) < 1e-5 * total)
      *ambiguous = true;
    run += v;
    if (run > target) return j;
  }
  return last;
}

std::vector<int32_t> gpu_sample(const std::vector<float>& logits, int rows, int vocab,
                                const std::vector<cuda::SampleParams>& params) {
  DeviceBuf d_logits(logits.size() * sizeof(float)), d_params(params.size() * sizeof(cuda::SampleParams)),
      d_out(static_cast<size_t>(rows) * sizeof(int32_t));
  to_device(d_logits, logits);
  to_device(d_params, params);
  cuda::sample(d_logits.as<float>(), rows, vocab, d_params.as<cuda::SampleParams>(),
               d_out.as<int32_t>(), nullptr);
  return from_device<int32_t>(d_out, static_cast<size_t>(rows));
}

}  // namespace

TEST_CASE("philox4x32-10 matches the Random123 known answers", "[gpu]") {
  // Random123 tests/kat_vectors, "philox4x32 10": counter[4], key[2] -> result[4].
  auto a = cuda::philox4x32_10(0u, 0u, 0u, 0u, 0u, 0u);
  CHECK(a.v[0] == 0x6627e8d5u);
  CHECK(a.v[1] == 0xe169c58du);
  CHECK(a.v[2] == 0xbc57ac4cu);
  CHECK(a.v[3] == 0x9b00dbd8u);
  auto b = cuda::philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
  auto c = cuda::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u,
                               0x299f31d0u);
  CHECK(c.v[0] == 0xd16cfe09u);
  CHECK(c.v[1] == 0x94fdccebu);
  CHECK(c.v[2] == 0x5001e420u);
  CHECK(c.v[3] == 0x24126ea1u);
  const float u = cuda::philox_uniform(42, 7);
  CHECK(u >= 0.0f);
  CHECK(u < 1.0f);
}

TEST_CASE("cuda: dequantization and conversion to bf16 match the CPU reference", "[gpu]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K,
                     GgmlType::F16, GgmlType::F32}) {
    const int64_t n = 256 * 37;
    INFO(ggml_type_info(t).name);
    std::mt19937 rng(static_cast<uint32_t>(t) + 1);
    std::normal_distribution<float> dist(0.0f, 0.7f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = dist(rng);
    std::vector<uint8_t> q(ggml_row_size(t, n));
    cpu::quantize_row(t, x.data(), q.data(), n);
    std::vector<float> ref(static_cast<size_t>(n));
    cpu::dequantize_row(t, q.data(), ref.data(), n);
    for (auto& v : ref) v = cpu::bf16_to_fp32(cpu::fp32_to_bf16(v));

    DeviceBuf d_src(q.size()), d_dst(static_cast<size_t>(n) * 2);
    to_device(d_src, q);
    if (t == GgmlType::F16 || t == GgmlType::F32)
      cuda::convert_to_bf16(d_src.p, t, n, d_dst.p, nullptr);
    else
      cuda::dequantize_to_bf16(d_src.p, t, n, d_dst.p, nullptr);
    const auto bits = from_device<uint16_t>(d_dst, static_cast<size_t>(n));
    std::vector<float> got(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) got[i] = cpu::bf16_to_fp32(bits[i]);
    // Identical arithmetic gives identical bits; allow one bf16 ulp for a reference that
    // rounds an FMA differently.
    require_close(got, ref, 1e-6f, 1.0f / 128.0f, "dequantize");
    size_t exact = 0;
    for (size_t i = 0; i < got.size(); ++i) exact += got[i] == ref[i];
    CHECK(exact * 100 >= got.size() * 99);
  }
}

TEST_CASE("cuda: embedding lookup from F32, F16 and BF16 tables", "[gpu]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int vocab = 37, dim = 300;
  const auto table = bf16_values(static_cast<size_t>(vocab * dim), 77, 4.0f);  // exact in all three
  const std::vector<int32_t> tokens = {0, 36, 5, 5, -1, 37, 12};  // -1 and 37: out of range
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    INFO(ggml_type_info(t).name);
    std::vector<uint8_t> bytes(ggml_row_size(t, dim) * vocab);
    cpu::quantize_row(t, table.data(), bytes.data(), static_cast<int64_t>(table.size()));
    DeviceBuf d_table(bytes.size()), d_tokens(tokens.size() * 4), d_out(tokens.size() * dim * 4);
    to_device(d_table, bytes);
    to_device(d_tokens, tokens);
    cuda::embed(d_table.p, t, vocab, dim, d_tokens.as<int32_t>(), static_cast<int64_t>(tokens.size()),
                d_out.as<float>(), nullptr);
    const auto out = from_device<float>(d_out, tokens.size() * dim);
    std::vector<float> want(out.size(), 0.0f);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] >= 0 && tokens[i] < vocab)
        std::copy_n(table.begin() + static_cast<long>(tokens[i]) * dim, dim, want.begin() + static_cast<long>(i) * dim);
    require_close(out, want, 0.0f, 0.0f, "embed");
  }
}

TEST_CASE("cuda: greedy sampling is the argmax, lowest index on ties", "[gpu]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (int vocab : {1, 7, 1000, 151936}) {
    const int rows = 5;
    std::vector<float> logits = bf16_values(static_cast<size_t>(rows * vocab), 9 + vocab, 8.0f);
    if (vocab > 3) {  // row 1: a tie between indices 2 and vocab-1 above everything else
      logits[static_cast<size_t>(vocab + 2)] = 100.0f;
      logits[static_cast<size_t>(2 * vocab - 1)] = 100.0f;
    }
    std::vector<cuda::SampleParams> params(rows);
    params[3].temperature = 1.0f;  // top_k = 1 is greedy too
    params[3].top_k = 1;
    const auto ids = gpu_sample(logits, rows, vocab, params);
    for (int r = 0; r < rows; ++r) {
      const auto* row = logits.data() + static_cast<size_t>(r) * vocab;
      const int want = static_cast<int>(std::max_element(row, row + vocab) - row);
      INFO("vocab " << vocab << " row " << r);
      REQUIRE(ids[static_cast<size_t>(r)] >= 0);
      REQUIRE(ids[static_cast<size_t>(r)] < vocab);
      if (r == 3)  // top_k = 1 keeps every token tied for the maximum (bf16 data has ties)
        CHECK(row[ids[static_cast<size_t>(r)]] == row[want]);
      else
        CHECK(ids[static_cast<size_t>(r)] == want);
    }
  }
}

TEST_CASE("cuda: temperature/top-k/top-p/min-p sampling follows the host rule", "[gpu]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int vocab = 1000;
  std::vector<float> logits;
  std::vector<cuda::SampleParams> params;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (float temp : {0.7f, 1.0f, 1.5f})
    for (int top_k : {0, 1, 5, 50})
      for (float top_p : {1.0f, 0.9f, 0.5f})
        for (float min_p : {0.0f, 0.05f})
          for (uint64_t counter = 0; counter < 6; ++counter) {
            for (int j = 0; j < vocab; ++j) logits.push_back(dist(rng));
            cuda::SampleParams p;
            p.temperature = temp;
            p.top_k = top_k;
            p.top_p = top_p;
            p.min_p = min_p;
            p.seed = 1234 + static_cast<uint64_t>(top_k);
            p.counter = counter;
            params.push_back(p);
          }
  const int rows = static_cast<int>(params.size());
  const auto ids = gpu_sample(logits, rows, vocab, params);
  const auto again = gpu_sample(logits, rows, vocab, params);
  CHECK(ids == again);  // deterministic for the same (logits, seed, counter)
  int mismatches = 0, ambiguous_rows = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + static_cast<long>(r) * vocab,
                           logits.begin() + static_cast<long>(r + 1) * vocab);
    bool ambiguous = false;
    const int want = reference_sample(row, params[static_cast<size_t>(r)], &ambiguous);
    if (ambiguous) {
      ++ambiguous_rows;
      continue;
    }
    if (ids[static_cast<size_t>(r)] != want) {
      if (mismatches < 5)
        UNSCOPED_INFO("row " << r << ": gpu " << ids[static_cast<size_t>(r)] << " host " << want);
      ++mismatches;
    }
  }
  INFO(ambiguous_rows << " of " << rows << " rows too close to a boundary to compare");
  CHECK(mismatches == 0);
  CHECK(ambiguous_rows * 10 < rows);
}

TEST_CASE("cuda: sampled frequencies follow the filtered distribution", "[gpu]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const std::vector<float> probs = {0.5f, 0.3f, 0.15f, 0.05f};
  struct Case {
    int top_k;
    float top_p, min_p;
    std::vector<double> want;
  };
  const Case cases[] = {
      {0, 1.0f, 0.0f, {0.5, 0.3, 0.15, 0.05}},
      {2, 1.0f, 0.0f, {0.625, 0.375, 0, 0}},
      {0, 0.7f, 0.0f, {0.625, 0.375, 0, 0}},
      {0, 1.0f, 0.5f, {0.625, 0.375, 0, 0}},  // keeps p >= 0.25
      {0, 0.4f, 0.0f, {1, 0, 0, 0}},
  };
  const int rows = 8000;
  for (const Case& c : cases) {
    std::vector<float> logits;
    std::vector<cuda::SampleParams> params(rows);
    for (int r = 0; r < rows; ++r) {
      for (float p : probs) logits.push_back(std::log(p));
      params[static_cast<size_t>(r)].temperature = 1.0f;
      params[static_cast<size_t>(r)].top_k = c.top_k;
      params[static_cast<size_t>(r)].top_p = c.top_p;
      params[static_cast<size_t>(r)].min_p = c.min_p;
      params[static_cast<size_t>(r)].seed = 99;
      params[static_cast<size_t>(r)].counter = static_cast<uint64_t>(r);
    }
    const auto ids = gpu_sample(logits, rows, 4, params);
    std::vector<double> freq(4, 0.0);
    for (int32_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < 4);
      freq[static_cast<size_t>(id)] += 1.0 / rows;
    }
    for (size_t j = 0; j < 4; ++j) {
      INFO("top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p << " token " << j);
      if (c.want[j] == 0)
        CHECK(freq[j] == 0.0);
      else
        CHECK(std::fabs(freq[j] - c.want[j]) < 0.025);
    }
  }
}
