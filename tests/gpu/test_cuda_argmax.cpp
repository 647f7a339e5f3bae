// The LM head's fused greedy argmax (kernels/argmax_key.h, gemv.cu / gemv_dp4a.cu's *_argmax
// kernels, argmax_pick.cu, CudaBackend::sample_greedy_matmul) against the host sampler's greedy
// draw (engine/sampling) and against the unfused path (matmul, then sample) on the same weights:
// - the key fold (CPU) picks the host sampler's token on rows with ties, -0 / +0, -inf and
//   all -inf rows;
// - on the device, bf16 weights (1-4 rows) and quantized ones through the int8 GEMV (1-8
//   rows), vocabularies above and below the kernels' 2048 warps (so warps walk several rows),
//   ties planted across warps and within one warp: the fused tokens equal the host sampler's
//   argmax of the logits the unfused matmul writes, and the unfused GPU draw, draw for draw
//   (with a row drawn twice and a nonzero row base);
// - draws that are not plain greedy, and shapes the GEMVs do not take, are refused.
// The device cases skip (CTest: Skipped) without a CUDA device; the emulator runs them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend/cuda/backend_cuda.h"
#include "engine/sampling/sampling.h"
#include "kernels/argmax_key.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/quant_blocks.h"

using namespace pagoda;
using namespace pagoda::gputest;
using namespace pagoda::test;

namespace {

// The host sampler's greedy token of one row.
int32_t host_greedy(const float* row, int vocab) {
  SamplingParams sp;
  sp.temperature = 0.0f;
  Rng rng(1);
  return sample_token(row, vocab, sp, {}, {}, rng).token;
}

// Greedy draws of rows row_base + 0..n-1, row 0 drawn twice (the n choices of one prompt).
std::vector<SampleRequest> greedy_draws(int64_t n, int64_t row_base) {
  std::vector<SampleRequest> d;
  for (int64_t i = 0; i < n; ++i) {
    SampleRequest r;
    r.row = static_cast<int32_t>(row_base + i);
    d.push_back(r);
    if (i == 0) d.push_back(r);
  }
  return d;
}

// The weights of one case: rows x cols of `type` (bf16 values stored as bf16, or random blocks).
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  if (type != GgmlType::BF16) return random_blocks(type, rows, cols, seed, cpu::fp32_to_fp16(0.0173f));
  const std::vector<float> v = bf16_values(static_cast<size_t>(rows * cols), seed);
  std::vector<uint8_t> bytes(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = cpu::fp32_to_bf16(v[i]);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

// Copies weight row `from` over row `to` (identical rows: identical logits, a tie).
void copy_row(std::vector<uint8_t>& w, GgmlType type, int64_t cols, int64_t from, int64_t to) {
  const size_t rb = ggml_row_size(type, cols);
  std::memcpy(w.data() + rb * static_cast<size_t>(to), w.data() + rb * static_cast<size_t>(from), rb);
}

struct Run {
  std::vector<float> logits;  // the unfused matmul's rows
  std::vector<int32_t> unfused, fused;
};

// The unfused path (matmul, read back, sample on the device) and the fused one over the same
// draws of rows row_base.. of an n-row activation.
Run run_both(CudaBackend& be, const Tensor& w, const Tensor& x, int64_t n, int64_t row_base) {
  const std::vector<SampleRequest> draws = greedy_draws(n, row_base);
  const auto nd = static_cast<int64_t>(draws.size());
  Run r;
  Tensor logits = be.alloc(n, w.rows);
  be.matmul(w, x, logits, n);
  r.logits = read_all(be, logits, n);
  be.begin_sampling(draws);
  be.sample(logits, row_base, 0, nd);
  r.unfused.assign(draws.size(), -1);
  be.finish_sampling(r.unfused.data(), nullptr);
  be.begin_sampling(draws);
  REQUIRE(be.sample_greedy_matmul(w, x, n, row_base, 0, nd));
  r.fused.assign(draws.size(), -1);
  be.finish_sampling(r.fused.data(), nullptr);
  return r;
}

}  // namespace

TEST_CASE("argmax keys pick the host sampler's greedy token", "[gpu][argmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {1.0f, 3.0f, 2.0f, 3.0f},            // tie: the lower id
      {-0.0f, 0.0f, -1.0f},                // -0 and +0 are equal: id 0
      {-5.0f, 0.0f, -0.0f, -7.0f},         // +0 before -0: id 1
      {-inf, -inf, -inf},                  // nothing finite: id 0
      {-inf, -3.0f, -inf, -3.0f},          // -inf never wins over a finite value
      {-1e30f, -1e-40f, -2e-40f},          // a denormal is the largest
      {std::numeric_limits<float>::max(), inf, 2.0f},  // +inf wins
      {7.0f},
  };
  for (const auto& r : rows) {
    INFO("row of " << r.size() << " starting " << r[0]);
    CHECK(argmax_by_keys(r.data(), static_cast<int>(r.size())) == host_greedy(r.data(), static_cast<int>(r.size())));
  }
  std::mt19937 rng(5);
  for (int t = 0; t < 200; ++t) {
    std::vector<float> r = bf16_values(300, 40 + t, 4.0f);
    std::uniform_int_distribution<int> pick(0, 299);
    for (int k = 0; k < 3; ++k) r[static_cast<size_t>(pick(rng))] = *std::max_element(r.begin(), r.end());
    CHECK(argmax_by_keys(r.data(), 300) == host_greedy(r.data(), 300));
  }
}

TEST_CASE("cuda: greedy draws fused into the LM head equal matmul then sample", "[gpu][argmax][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackend be;
  struct Shape {
    GgmlType type;
    int64_t rows, cols, max_n;
  };
  // 6000 rows: 2048 warps, each walking 2-3 rows; 777: one warp per row (some idle).
  const Shape shapes[] = {{GgmlType::BF16, 6000, 64, cuda::kGemvMaxRows},
                          {GgmlType::BF16, 777, 72, cuda::kGemvMaxRows},
                          {GgmlType::Q8_0, 6000, 64, cuda::kQuantGemvMaxRows},
                          {GgmlType::Q4_K, 777, 256, cuda::kQuantGemvMaxRows}};
  for (const Shape& s : shapes) {
    std::vector<uint8_t> bits = random_weights(s.type, s.rows, s.cols, 7 + static_cast<uint32_t>(s.rows));
    for (int64_t n = 1; n <= s.max_n; n += (s.max_n == 8 ? 3 : 1)) {
      INFO(ggml_type_info(s.type).name << " " << s.rows << "x" << s.cols << ", " << n << " rows");
      const std::vector<float> xv = bf16_values(static_cast<size_t>(n * s.cols), 3 + static_cast<uint32_t>(n), 1.0f);
      const Tensor x = activation_from(be, xv, n, s.cols);
      // First pass: find each row's winner, then plant ties at it: a copy one row lower (another
      // warp, and now the lowest id) and one 2048 rows higher (the same warp's next row).
      Tensor w0 = be.upload_weight(bits.data(), s.type, s.rows, s.cols);
      const Run first = run_both(be, w0, x, n, 0);
      std::vector<uint8_t> tied = bits;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t m = host_greedy(first.logits.data() + i * s.rows, static_cast<int>(s.rows));
        if (m > 0) copy_row(tied, s.type, s.cols, m, m - 1);
        if (m + cuda::kArgmaxMaxParts < s.rows) copy_row(tied, s.type, s.cols, m, m + cuda::kArgmaxMaxParts);
      }
      for (const auto* w : {&bits, &tied}) {
        const Tensor wt = be.upload_weight(w->data(), s.type, s.rows, s.cols);
        for (int64_t row_base : {int64_t{0}, int64_t{3}}) {
          const Run r = run_both(be, wt, x, n, row_base);
          size_t k = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float* row = r.logits.data() + i * s.rows;
            const int32_t want = host_greedy(row, static_cast<int>(s.rows));
            for (int rep = 0; rep < (i == 0 ? 2 : 1); ++rep, ++k) {
              INFO("activation row " << i << ", row base " << row_base << ", tied weights " << (w == &tied));
              CHECK(r.fused[k] == want);
              CHECK(r.unfused[k] == want);
            }
            if (w == &tied) {  // the planted tie is there: the max occurs at least twice
              const float mx = row[want];
              CHECK(std::count(row, row + s.rows, mx) >= 2);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cuda: the fused LM-head argmax refuses draws and shapes it does not serve", "[gpu][argmax][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  CudaBackend be;
  const int64_t rows = 300, cols = 64;
  const std::vector<uint8_t> bits = random_weights(GgmlType::BF16, rows, cols, 11);
  const Tensor w = be.upload_weight(bits.data(), GgmlType::BF16, rows, cols);
  const Tensor x = activation_from(be, bf16_values(static_cast<size_t>(8 * cols), 12), 8, cols);
  auto refused = [&](std::vector<SampleRequest> draws, int64_t n) {
    be.begin_sampling(draws);
    const bool took = be.sample_greedy_matmul(w, x, n, 0, 0, static_cast<int64_t>(draws.size()));
    std::vector<int32_t> ids(draws.size());
    be.finish_sampling(ids.data(), nullptr);
    return !took;
  };
  std::vector<SampleRequest> d = greedy_draws(1, 0);
  CHECK(!refused(d, 1));
  d[1].logprobs = 0;  // logprobs need the logits row
  CHECK(refused(d, 1));
  d = greedy_draws(1, 0);
  d[1].temperature = 0.7f;
  CHECK(refused(d, 1));
  d = greedy_draws(1, 0);
  d[0].token_edits = d[1].token_edits = {TokenEdit{3, kEditBias, 1.0f, 0}};
  CHECK(refused(d, 1));
  const std::vector<uint32_t> mask((rows + 31) / 32, ~0u);
  d = greedy_draws(1, 0);
  for (auto& r : d) {
    r.mask = mask.data();
    r.mask_words = mask.size();
  }
  CHECK(refused(d, 1));
  CHECK(refused(greedy_draws(cuda::kGemvMaxRows + 1, 0), cuda::kGemvMaxRows + 1));  // cuBLAS rows: unfused
}
