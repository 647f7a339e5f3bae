// Quantized weights on the GPU, every GGML block type pagoda reads: the device decoders
// (kernels/cuda/quant_decode.cuh) through dequantize_to_bf16 and embed against the CPU
// reference's values (kernels/cpu/quants*.cpp), the decode GEMVs at 1-8 rows (gemv_quant.cu
// with f32 activations against an exact reference; gemv_dp4a.cu with int8 activations against
// the CPU's int8 matmul, its activation quantization bit for bit) and their batch invariance,
// the tensor-core GEMM for more rows (gemm_quant_mma.cu) against the bf16-rounded products,
// the batch-invariant int8 GEMM (gemm_int8_mma.cu) against the GEMV bit for bit at 1-70 rows and
// its s8 MMA instruction alone, and CudaBackend's matmul and moe_ffn in every weight mode
// (quantized, quantized-f32, bf16; tensor-core GEMM, dequantized scratch + cuBLAS or with
// batch_invariant the int8 GEMM above 8 rows) against the CpuBackend on the
// same bits at 1-8, 16, 64 and 512 rows and odd shapes. Weights are random bytes with finite fp16 scales
// (tests/support/quant_blocks.h), so every bit pattern of the quants and sub-block scales
// occurs. Skips (passes with a warning) without a CUDA device.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/quant_blocks.h"

using namespace pagoda;
using namespace pagoda::gputest;

namespace {

const GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                           GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS};

const uint16_t kScale = cpu::fp32_to_fp16(0.0173f);  // every block's fp16 scale fields

struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
};

template <class T>
std::unique_ptr<DeviceBuf> on_device(const std::vector<T>& h) {
  auto d = std::make_unique<DeviceBuf>(std::max<size_t>(h.size() * sizeof(T), 1));
  CUDA_CHECK(cudaMemcpy(d->p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> from_device(const DeviceBuf& d, size_t n) {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

int block_elems(GgmlType t) { return ggml_type_info(t).block_size; }

// The CPU reference's values of rows x cols weights of type t.
std::vector<float> cpu_values(GgmlType t, const std::vector<uint8_t>& bits, int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    cpu::dequantize_row(t, bits.data() + ggml_row_size(t, cols) * static_cast<size_t>(r), v.data() + r * cols, cols);
  return v;
}

// out[i * rows + r] = sum_k x[i, k] w[r, k] in double, and the same sums of |products| (the
// scale a rounding error is measured against).
void reference(const std::vector<float>& w, const std::vector<float>& x, int64_t n, int64_t rows, int64_t cols,
               std::vector<float>& out, std::vector<float>& mag) {
  out.assign(static_cast<size_t>(n * rows), 0.0f);
  mag.assign(out.size(), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(w[r * cols + k]) * x[i * cols + k];
        s += p;
        a += std::fabs(p);
      }
      out[i * rows + r] = static_cast<float>(s);
      mag[i * rows + r] = static_cast<float>(a);
    }
}

// |got - want| <= rel * mag + 1e-6 element-wise.
void require_within(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& mag,
                    float rel, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= rel * mag[i] + 1e-6f)) {
      if (bad < 5) UNSCOPED_INFO(what << ": [" << i << "] gpu " << got[i] << " reference " << want[i]);
      ++bad;
    }
  INFO(what << ": " << bad << " of " << got.size() << " outside tolerance");
  CHECK(bad == 0);
}

KvCacheConfig small_cache() {
  KvCacheConfig c;
  c.n_layers = 1;
  c.num_blocks = 40;  // 640 tokens of 16
  c.block_size = 16;
  c.n_kv_heads = 1;
  c.head_dim = 32;
  return c;
}

// One sequence of n new tokens, blocks 0.. in order.
StepPlan linear_plan(int n) {
  TestSeq s;
  s.n_new = n;
  for (int b = 0; b * 16 < n; ++b) s.blocks.push_back(b);
  return make_plan({s}, 16);
}

}  // namespace

TEST_CASE("cuda: every block type dequantizes to the CPU reference's values", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    INFO(ggml_type_info(t).name);
    const int64_t rows = 3, cols = block_elems(t) * 3;
    const auto bits = test::random_blocks(t, rows, cols, 7 + static_cast<uint32_t>(t), kScale);
    const auto want = cpu_values(t, bits, rows, cols);
    auto d_bits = on_device(bits);

    DeviceBuf d_bf16(static_cast<size_t>(rows * cols) * 2);
    cuda::dequantize_to_bf16(d_bits->p, t, rows * cols, d_bf16.p, nullptr);
    const auto got_bits = from_device<uint16_t>(d_bf16, static_cast<size_t>(rows * cols));
    std::vector<float> got(got_bits.size()), want_bf16(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      got[i] = cpu::bf16_to_fp32(got_bits[i]);
      want_bf16[i] = cpu::bf16_to_fp32(cpu::fp32_to_bf16(want[i]));
    }
    require_close(got, want_bf16, 0.0f, 0.0f, "dequantize_to_bf16");

    // embed: rows 2, 0, an out-of-range token (a zero row), 1; F32 values as the CPU decodes them.
    const std::vector<int32_t> tokens = {2, 0, 3, 1};
    auto d_tok = on_device(tokens);
    DeviceBuf d_out(tokens.size() * static_cast<size_t>(cols) * 4);
    cuda::embed(d_bits->p, t, rows, cols, d_tok->as<int32_t>(), 4, d_out.as<float>(), nullptr);
    const auto emb = from_device<float>(d_out, tokens.size() * static_cast<size_t>(cols));
    std::vector<float> want_emb;
    for (int32_t tok : tokens)
      for (int64_t c = 0; c < cols; ++c) want_emb.push_back(tok < rows ? want[tok * cols + c] : 0.0f);
    require_close(emb, want_emb, 0.0f, 0.0f, "embed");
  }
}

TEST_CASE("cuda: gemv_quant matches the reference at 1-8 rows, whatever the batch", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    // 37 rows (not a multiple of the 4 warps of a CUDA block) of 3 blocks (fewer pieces than
    // lanes), and 9 rows of 1,280 values (40 pieces: lanes take two).
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 3 * block_elems(t)}, {9, 1280}}) {
      INFO(ggml_type_info(t).name << " " << rows << "x" << cols);
      const auto bits = test::random_blocks(t, rows, cols, 11 + static_cast<uint32_t>(t) + static_cast<uint32_t>(cols), kScale);
      const auto w = cpu_values(t, bits, rows, cols);
      auto d_w = on_device(bits);
      const auto x = bf16_values(static_cast<size_t>(8 * cols), 5 + static_cast<uint32_t>(cols));
      auto d_x = on_device(x);
      DeviceBuf d_out(static_cast<size_t>(8 * rows) * 4);
      // Each activation row alone (n = 1): the batch results below must match these bits.
      std::vector<float> single(static_cast<size_t>(8 * rows));
      for (int64_t i = 0; i < 8; ++i) {
        REQUIRE(cuda::gemv_quant(d_w->p, t, d_x->as<float>() + i * cols, d_out.as<float>() + i * rows, 1, rows,
                                 cols, cols, rows, nullptr));
      }
      single = from_device<float>(d_out, single.size());
      for (int n = 1; n <= cuda::kQuantGemvMaxRows; ++n) {
        INFO("n " << n);
        CUDA_CHECK(cudaMemset(d_out.p, 0xff, static_cast<size_t>(8 * rows) * 4));
        REQUIRE(cuda::gemv_quant(d_w->p, t, d_x->as<float>(), d_out.as<float>(), n, rows, cols, cols, rows, nullptr));
        const auto got = from_device<float>(d_out, static_cast<size_t>(n * rows));
        std::vector<float> want, mag;
        reference(w, x, n, rows, cols, want, mag);
        require_within(got, want, mag, 1e-5f, "gemv_quant");
        const std::vector<float> alone(single.begin(), single.begin() + n * rows);
        require_close(got, alone, 0.0f, 0.0f, "batch invariance");
      }
      CHECK_FALSE(cuda::gemv_quant(d_w->p, t, d_x->as<float>(), d_out.as<float>(), 9, rows, cols, cols, rows, nullptr));
    }
  }
}

TEST_CASE("cuda: gemv_quant_dp4a sums what the CPU's int8 matmul sums, whatever the batch", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  cpu::ThreadPool pool(1);
  for (GgmlType t : kTypes) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 3 * block_elems(t)}, {9, 1280}}) {
      INFO(ggml_type_info(t).name << " " << rows << "x" << cols);
      const auto bits = test::random_blocks(t, rows, cols, 13 + static_cast<uint32_t>(t) + static_cast<uint32_t>(cols), kScale);
      const auto w = cpu_values(t, bits, rows, cols);
      auto d_w = on_device(bits);
      auto x = bf16_values(static_cast<size_t>(8 * cols), 9 + static_cast<uint32_t>(cols));
      for (int64_t k = 0; k < 32; ++k) x[static_cast<size_t>(k)] = 0.0f;  // an all-zero block: scale 0
      auto d_x = on_device(x);

      // The activations: the CPU's quantization, bit for bit.
      const cuda::Q8ActsLayout L = cuda::q8_acts_layout(8, cols);
      DeviceBuf d_acts(L.bytes);
      cuda::quantize_acts_q8(d_x->as<float>(), 8, cols, cols, d_acts.p, nullptr);
      const auto acts = from_device<uint8_t>(d_acts, L.bytes);
      for (int64_t i = 0; i < 8; ++i) {
        std::vector<int8_t> q(static_cast<size_t>(cols));
        std::vector<float> d(static_cast<size_t>(cols / 32));
        std::vector<int16_t> sums(static_cast<size_t>(cols / 16));
        cpu::detail::quantize_activation_row(x.data() + i * cols, cols, q.data(), d.data(), sums.data());
        CHECK(std::memcmp(acts.data() + L.q_offset + i * cols, q.data(), q.size()) == 0);
        CHECK(std::memcmp(acts.data() + L.d_offset + i * (cols / 32) * 4, d.data(), d.size() * 4) == 0);
        const int32_t* gs = reinterpret_cast<const int32_t*>(acts.data() + L.sum_offset) + i * (cols / 16);
        for (int64_t h = 0; h < cols / 16; ++h) CHECK(gs[h] == sums[static_cast<size_t>(h)]);
      }

      DeviceBuf d_out(static_cast<size_t>(8 * rows) * 4);
      // Each row alone (n = 1) first: the batches below must give these bits.
      std::vector<float> single;
      for (int64_t i = 0; i < 8; ++i) {
        const cuda::Q8ActsLayout L1 = cuda::q8_acts_layout(1, cols);
        DeviceBuf one(L1.bytes);
        cuda::quantize_acts_q8(d_x->as<float>() + i * cols, 1, cols, cols, one.p, nullptr);
        REQUIRE(cuda::gemv_quant_dp4a(d_w->p, t, one.p, d_out.as<float>(), 1, rows, cols, rows, nullptr));
        const auto r = from_device<float>(d_out, static_cast<size_t>(rows));
        single.insert(single.end(), r.begin(), r.end());
      }
      for (int n = 1; n <= cuda::kQuantGemvMaxRows; ++n) {
        INFO("n " << n);
        const cuda::Q8ActsLayout Ln = cuda::q8_acts_layout(n, cols);
        DeviceBuf acts_n(Ln.bytes);
        cuda::quantize_acts_q8(d_x->as<float>(), n, cols, cols, acts_n.p, nullptr);
        CUDA_CHECK(cudaMemset(d_out.p, 0xff, static_cast<size_t>(8 * rows) * 4));
        REQUIRE(cuda::gemv_quant_dp4a(d_w->p, t, acts_n.p, d_out.as<float>(), n, rows, cols, rows, nullptr));
        const auto got = from_device<float>(d_out, static_cast<size_t>(n * rows));
        std::vector<float> want, mag, cpu_int8(static_cast<size_t>(n * rows));
        reference(w, x, n, rows, cols, want, mag);
        cpu::matmul(pool, t, bits.data(), rows, cols, x.data(), n, cpu_int8.data());
        // The same integer sums as the CPU: only the per-piece float terms round differently.
        require_within(got, cpu_int8, mag, 2e-5f, "vs the CPU's int8 matmul");
        // int8 activations: at most half a step (amax / 254) off per value.
        require_within(got, want, mag, 1e-2f, "vs exact");
        const std::vector<float> alone(single.begin(), single.begin() + n * rows);
        require_close(got, alone, 0.0f, 0.0f, "batch invariance");
      }
      CHECK_FALSE(cuda::gemv_quant_dp4a(d_w->p, t, d_acts.p, d_out.as<float>(), 9, rows, cols, rows, nullptr));
    }
  }
}

// The tensor-core GEMM against the products of the bf16-rounded weights and activations (what
// it computes: only the f32 summation order may differ), for every type at 9, 16, 64 and 512
// activation rows: 200 x 512 weights (two 128-row tiles, the second partial; eight 64-value k
// steps), and 37 rows of three blocks (a partial k step for the 32-value types) with strides
// wider than the matrix, x not 16-byte aligned (the scalar loads) and a partial token tile.
TEST_CASE("cuda: gemm_quant_mma computes the bf16-rounded products", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (GgmlType t : kTypes) {
    struct Shape {
      int64_t rows, cols, pad_x, pad_out;
      std::vector<int> ns;
    };
    const Shape shapes[] = {{200, 512, 0, 0, {9, 16, 64, 512}}, {37, 3 * block_elems(t), 1, 3, {33}}};
    for (const Shape& s : shapes) {
      const auto bits = test::random_blocks(t, s.rows, s.cols, 23 + static_cast<uint32_t>(t) + static_cast<uint32_t>(s.cols), kScale);
      auto wv = cpu_values(t, bits, s.rows, s.cols);
      for (float& v : wv) v = cpu::bf16_to_fp32(cpu::fp32_to_bf16(v));
      auto d_w = on_device(bits);
      for (int n : s.ns) {
        INFO(ggml_type_info(t).name << " " << s.rows << "x" << s.cols << " n " << n);
        const int64_t ld_x = s.cols + s.pad_x, ld_out = s.rows + s.pad_out;
        // Activations that bf16 cannot hold exactly (the kernel rounds them), in rows of ld_x.
        const auto base = bf16_values(static_cast<size_t>(n * ld_x), 29 + static_cast<uint32_t>(n));
        std::vector<float> x(base.size());
        for (size_t i = 0; i < x.size(); ++i) x[i] = base[i] * 1.2345f;
        // The kernel reads row i from x + pad_x + i * ld_x.
        std::vector<float> xr(static_cast<size_t>(n * s.cols));
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < s.cols; ++k)
            xr[static_cast<size_t>(i * s.cols + k)] =
                cpu::bf16_to_fp32(cpu::fp32_to_bf16(x[static_cast<size_t>(i * ld_x + k + s.pad_x)]));
        auto d_x = on_device(x);
        DeviceBuf d_out(static_cast<size_t>(n * ld_out) * 4);
        CUDA_CHECK(cudaMemset(d_out.p, 0xff, static_cast<size_t>(n * ld_out) * 4));
        REQUIRE(cuda::gemm_quant_mma(d_w->p, t, d_x->as<float>() + s.pad_x, d_out.as<float>(), n, s.rows, s.cols,
                                     ld_x, ld_out, nullptr));
        const auto all = from_device<float>(d_out, static_cast<size_t>(n * ld_out));
        std::vector<float> got;
        for (int64_t i = 0; i < n; ++i) {
          got.insert(got.end(), all.begin() + i * ld_out, all.begin() + i * ld_out + s.rows);
          for (int64_t r = s.rows; r < ld_out; ++r) CHECK(std::isnan(all[static_cast<size_t>(i * ld_out + r)]));
        }
        std::vector<float> want, mag;
        reference(wv, xr, n, s.rows, s.cols, want, mag);
        require_within(got, want, mag, 1e-5f, "gemm_quant_mma vs bf16 products");
      }
    }
  }
}

// The s8 tensor-core instruction gemm_quant_int8 uses, alone: every lane's fragments as mma.cuh
// places them (on a GPU this checks that reading of the PTX ISA; under the emulator, the
// emulator's), over the whole int8 range, accumulating into the lanes' initial values.
TEST_CASE("cuda: mma_s8_m16n8k16 multiplies 16x16 by 16x8 int8 exactly", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  std::vector<int8_t> a(256), b(128);
  uint32_t s = 7;
  auto next = [&] { return s = s * 1664525u + 1013904223u, static_cast<int8_t>(s >> 24); };
  for (auto& v : a) v = next();
  for (auto& v : b) v = next();
  a[0] = b[0] = -128;  // the extremes
  a[1] = b[8] = 127;
  auto d_a = on_device(a), d_b = on_device(b);
  DeviceBuf d_c(128 * 4);
  cuda::mma_s8_probe(d_a->as<int8_t>(), d_b->as<int8_t>(), d_c.as<int32_t>(), nullptr);
  const auto c = from_device<int32_t>(d_c, 128);
  int bad = 0;
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 8; ++col) {
      int32_t want = 1 + (col % 2) + 2 * (r >= 8);  // the accumulator's start, {1, 2, 3, 4}
      for (int k = 0; k < 16; ++k) want += a[static_cast<size_t>(r * 16 + k)] * b[static_cast<size_t>(k * 8 + col)];
      if (c[static_cast<size_t>(r * 8 + col)] != want) {
        if (bad < 5) UNSCOPED_INFO("c[" << r << "][" << col << "] " << c[static_cast<size_t>(r * 8 + col)] << " want " << want);
        ++bad;
      }
    }
  CHECK(bad == 0);
}

// The batch-invariant GEMM against its oracle, the int8 GEMV (whose rows are batch-invariant:
// the dp4a test above), bit for bit: activation rows 1..70 (every count for Q8_0, Q4_0 and
// Q4_K, a few for the other types), on 45 weight rows of 2304 columns (72 pieces: several per
// slot; two 32-row tiles, the second partial) with an output stride wider than the matrix, and
// 37 rows of three blocks (fewer pieces than slots).
TEST_CASE("cuda: gemm_quant_int8 gives every row the int8 GEMV's bits at 1-70 rows", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  constexpr int kRows = 70;
  for (GgmlType t : kTypes) {
    const bool every = t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K;
    struct Shape {
      int64_t rows, cols, pad_out;
    };
    for (const Shape& sh : {Shape{45, 2304, 3}, Shape{37, 3 * block_elems(t), 0}}) {
      const int64_t rows = sh.rows, cols = sh.cols, ld_out = rows + sh.pad_out;
      INFO(ggml_type_info(t).name << " " << rows << "x" << cols);
      const auto bits = test::random_blocks(t, rows, cols, 41 + static_cast<uint32_t>(t) + static_cast<uint32_t>(cols), kScale);
      auto d_w = on_device(bits);
      auto x = bf16_values(static_cast<size_t>(kRows * cols), 43 + static_cast<uint32_t>(cols));
      for (int64_t k = 0; k < 32; ++k) x[static_cast<size_t>(5 * cols + k)] = 0.0f;  // an all-zero block: scale 0
      auto d_x = on_device(x);
      // The oracle: the GEMV over chunks of up to 8 rows, each chunk quantized on its own.
      DeviceBuf d_want(static_cast<size_t>(kRows * ld_out) * 4);
      for (int64_t first = 0; first < kRows; first += cuda::kQuantGemvMaxRows) {
        const int64_t c = std::min<int64_t>(cuda::kQuantGemvMaxRows, kRows - first);
        DeviceBuf acts(cuda::q8_acts_layout(c, cols).bytes);
        cuda::quantize_acts_q8(d_x->as<float>() + first * cols, c, cols, cols, acts.p, nullptr);
        REQUIRE(cuda::gemv_quant_dp4a(d_w->p, t, acts.p, d_want.as<float>() + first * ld_out, c, rows, cols, ld_out,
                                      nullptr));
      }
      const auto want = from_device<float>(d_want, static_cast<size_t>(kRows * ld_out));
      DeviceBuf d_out(static_cast<size_t>(kRows * ld_out) * 4);
      int checked = 0;
      for (int n = 1; n <= kRows; ++n) {
        if (!every && n != 1 && n != 9 && n != 33 && n != kRows) continue;
        INFO("n " << n);
        DeviceBuf acts(cuda::q8_acts_layout(n, cols).bytes);
        cuda::quantize_acts_q8(d_x->as<float>(), n, cols, cols, acts.p, nullptr);
        CUDA_CHECK(cudaMemset(d_out.p, 0xff, static_cast<size_t>(kRows * ld_out) * 4));
        REQUIRE(cuda::gemm_quant_int8(d_w->p, t, acts.p, d_out.as<float>(), n, rows, cols, ld_out, nullptr));
        const auto got = from_device<float>(d_out, static_cast<size_t>(kRows * ld_out));
        int bad = 0, untouched = 0;
        for (int64_t i = 0; i < kRows; ++i)
          for (int64_t r = 0; r < ld_out; ++r) {
            const size_t e = static_cast<size_t>(i * ld_out + r);
            if (i >= n || r >= rows) {
              untouched += std::isnan(got[e]) ? 1 : 0;  // never written
              continue;
            }
            if (std::memcmp(&got[e], &want[e], 4) != 0) {
              if (bad < 5) UNSCOPED_INFO("row " << i << " output " << r << ": gemm " << got[e] << " gemv " << want[e]);
              ++bad;
            }
          }
        CHECK(bad == 0);
        CHECK(untouched == kRows * ld_out - n * rows);
        ++checked;
      }
      CHECK(checked == (every ? kRows : 4));
    }
  }
}

TEST_CASE("cuda: matmul of quantized weights matches the CPU backend in every weight mode", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  // More than kQuantGemvMaxRows rows: the tensor-core GEMM in both quantized modes, the
  // dequantized scratch for cuBLAS once, and the int8 GEMM of batch_invariant.
  struct Mode {
    CudaWeights weights;
    QuantGemm gemm;
    bool invariant;
  };
  const Mode modes[] = {{CudaWeights::Quantized, QuantGemm::Mma, false},
                        {CudaWeights::Quantized, QuantGemm::DequantCublas, false},
                        {CudaWeights::QuantizedF32, QuantGemm::Mma, false},
                        {CudaWeights::Bf16, QuantGemm::Mma, false},
                        {CudaWeights::Quantized, QuantGemm::Mma, true}};
  for (const auto& [mode, gemm, invariant] : modes) {
    const bool quantized = mode != CudaWeights::Bf16;
    INFO(cuda_weights_name(mode) << " mode, GEMM " << quant_gemm_name(gemm) << (invariant ? ", batch-invariant" : ""));
    CpuBackend cpu{2};
    CudaBackendOptions opts;
    opts.weights = mode;
    opts.quant_gemm = gemm;
    opts.batch_invariant = invariant;
    CudaBackend gpu(opts);
    Backend* both[2] = {&cpu, &gpu};
    for (Backend* b : both) b->init_kv_cache(small_cache());
    for (GgmlType t : kTypes) {
      struct Shape {
        int64_t rows, cols;
        std::vector<int> ns;
      };
      const Shape shapes[] = {{37, 2 * block_elems(t), {1, 2, 3, 4, 5, 6, 7, 8, 16, 64, 512}},
                              {6, 3 * block_elems(t), {1, 5, 9}},
                              {130, 256, {16, 70}}};  // two 128-row tiles, the second of 2 rows
      for (const Shape& s : shapes) {
        const auto bits = test::random_blocks(t, s.rows, s.cols, 3 + static_cast<uint32_t>(t) + static_cast<uint32_t>(s.cols), kScale);
        const auto wv = cpu_values(t, bits, s.rows, s.cols);
        Tensor w[2];
        for (int b = 0; b < 2; ++b) w[b] = both[b]->upload_weight(bits.data(), t, s.rows, s.cols);
        CHECK(w[1].type == (quantized ? t : GgmlType::BF16));
        for (int n : s.ns) {
          INFO(ggml_type_info(t).name << " " << s.rows << "x" << s.cols << " n " << n);
          const auto xv = bf16_values(static_cast<size_t>(n * s.cols), 17 + static_cast<uint32_t>(n));
          std::vector<float> res[2];
          for (int b = 0; b < 2; ++b) {
            both[b]->begin_step(linear_plan(n));
            Tensor x = activation_from(*both[b], xv, n, s.cols);
            Tensor out = both[b]->alloc(n, s.rows);
            both[b]->matmul(w[b], x, out, n);
            res[b] = read_all(*both[b], out, n);
          }
          // Against the CPU backend as test_cuda_ops compares quantized GEMMs (the CPU may
          // quantize x): a few percent of the output scale.
          float scale = 0;
          for (float v : res[0]) scale = std::max(scale, std::fabs(v));
          require_close(res[1], res[0], 0.03f * scale, 0.0f, "vs CPU backend");
          // Against the exact products: up to kQuantGemvMaxRows rows (any count with
          // batch_invariant), int8 activations with the CPU's integer sums (quantized) or f32 FMA
          // (quantized-f32); otherwise bf16 weights and activations (2^-8 relative each).
          std::vector<float> want, mag;
          reference(wv, xv, n, s.rows, s.cols, want, mag);
          const bool gemv = quantized && (n <= cuda::kQuantGemvMaxRows || invariant);  // int8 or f32 activations
          if (gemv && mode == CudaWeights::Quantized && n <= cuda::kQuantGemvMaxRows) require_within(res[1], res[0], mag, 2e-5f, "vs CPU int8 sums");
          require_within(res[1], want, mag, !gemv ? 8e-3f : mode == CudaWeights::Quantized ? 1e-2f : 1e-5f, "vs exact");
        }
      }
    }
  }
}

TEST_CASE("cuda: moe_ffn runs quantized experts as the CPU backend does", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int ne = 4, k = 2;
  const int64_t dim = 256, ff = 256;
  for (CudaWeights mode : {CudaWeights::Quantized, CudaWeights::QuantizedF32, CudaWeights::Bf16}) {
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::IQ4_XS}) {
      CpuBackend cpu{2};
      CudaBackendOptions opts;
      opts.weights = mode;
      CudaBackend gpu(opts);
      Backend* both[2] = {&cpu, &gpu};
      const auto gate = test::random_blocks(t, ne * ff, dim, 41, kScale);
      const auto up = test::random_blocks(t, ne * ff, dim, 42, kScale);
      const auto down = test::random_blocks(t, ne * dim, ff, 43, kScale);
      // 6 tokens: every expert gets at most 6 rows (the GEMV); 24 tokens: expert 0 gets all 24
      // (the dequantized path) beside experts with a few.
      for (int n : {6, 24}) {
        INFO(ggml_type_info(t).name << " n " << n << " " << cuda_weights_name(mode));
        std::vector<int32_t> experts;
        std::vector<float> weights;
        for (int i = 0; i < n; ++i) {
          experts.push_back(n > 8 ? 0 : i % ne);
          experts.push_back(1 + (i * 7) % (ne - 1));
          weights.push_back(0.75f);
          weights.push_back(0.25f);
        }
        const auto xv = bf16_values(static_cast<size_t>(n * dim), 51 + static_cast<uint32_t>(n), 0.5f);
        std::vector<float> res[2];
        for (int b = 0; b < 2; ++b) {
          Backend& be = *both[b];
          be.init_kv_cache(small_cache());
          ExpertWeights ew;
          ew.gate = be.upload_weight(gate.data(), t, ne * ff, dim);
          ew.up = be.upload_weight(up.data(), t, ne * ff, dim);
          ew.down = be.upload_weight(down.data(), t, ne * dim, ff);
          ew.n_experts = ne;
          be.begin_step(linear_plan(n));
          Tensor x = activation_from(be, xv, n, dim);
          Tensor out = be.alloc(n, dim);
          be.moe_ffn(ew, x, experts.data(), weights.data(), k, nullptr, nullptr, out, n);
          res[b] = read_all(be, out, n);
        }
        float scale = 0;
        for (float v : res[0]) scale = std::max(scale, std::fabs(v));
        require_close(res[1], res[0], 0.03f * scale, 0.0f, "moe_ffn vs CPU backend");
      }
    }
  }
}

// Many experts, as a decode step of a 64-128 expert model sees them: the quantized mode runs the
// experts with at most kQuantGemvMaxRows rows as grouped launches (one per row count), and a
// token's output must not depend on the others routed beside it (each expert's rows are
// computed by fixed per-row chains). Mixed types as Q4_K_M files have them (down in Q6_K).
TEST_CASE("cuda: grouped quantized experts equal the CPU backend and each token alone", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int ne = 16, k = 4;
  const int64_t dim = 256, ff = 256;
  CpuBackend cpu{2};
  CudaBackendOptions opts;
  opts.weights = CudaWeights::Quantized;
  CudaBackend gpu(opts);
  const auto gate = test::random_blocks(GgmlType::Q4_K, ne * ff, dim, 61, kScale);
  const auto up = test::random_blocks(GgmlType::Q4_K, ne * ff, dim, 62, kScale);
  const auto down = test::random_blocks(GgmlType::Q6_K, ne * dim, ff, 63, kScale);
  ExpertWeights ew[2];
  Backend* both[2] = {&cpu, &gpu};
  for (int b = 0; b < 2; ++b) {
    both[b]->init_kv_cache(small_cache());
    ew[b].gate = both[b]->upload_weight(gate.data(), GgmlType::Q4_K, ne * ff, dim);
    ew[b].up = both[b]->upload_weight(up.data(), GgmlType::Q4_K, ne * ff, dim);
    ew[b].down = both[b]->upload_weight(down.data(), GgmlType::Q6_K, ne * dim, ff);
    ew[b].n_experts = ne;
  }
  // Token i's experts: i, i + 3, i + 7 (mod 16) and expert 15; with 12 tokens expert 15 gets
  // 12 rows (past the GEMV: its own matmul) beside experts with 1-3 rows.
  const auto run = [&](Backend& be, const ExpertWeights& w, const std::vector<float>& xv, int first, int n) {
    std::vector<int32_t> experts;
    std::vector<float> weights;
    for (int i = first; i < first + n; ++i) {
      for (int j : {i % ne, (i + 3) % ne, (i + 7) % ne}) experts.push_back(j == ne - 1 ? 0 : j);
      experts.push_back(ne - 1);
      for (float v : {0.4f, 0.3f, 0.2f, 0.1f}) weights.push_back(v);
    }
    be.begin_step(linear_plan(n));
    const std::vector<float> rows(xv.begin() + first * dim, xv.begin() + (first + n) * dim);
    Tensor x = activation_from(be, rows, n, dim);
    Tensor out = be.alloc(n, dim);
    be.moe_ffn(w, x, experts.data(), weights.data(), k, nullptr, nullptr, out, n);
    return read_all(be, out, n);
  };
  for (int n : {8, 12}) {
    INFO("n " << n);
    const auto xv = bf16_values(static_cast<size_t>(n * dim), 71 + static_cast<uint32_t>(n), 0.5f);
    const std::vector<float> want = run(cpu, ew[0], xv, 0, n), got = run(gpu, ew[1], xv, 0, n);
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    require_close(got, want, 0.03f * scale, 0.0f, "grouped moe_ffn vs CPU backend");
    if (n > cuda::kQuantGemvMaxRows) continue;  // expert 15's rows went through cuBLAS: no bitwise claim
    for (int i = 0; i < n; ++i) {
      const std::vector<float> alone = run(gpu, ew[1], xv, i, 1);
      INFO("token " << i);
      CHECK(std::memcmp(alone.data(), got.data() + i * dim, sizeof(float) * static_cast<size_t>(dim)) == 0);
    }
  }
}

// A layer's q/k/v (or gate/up) read the same x: matmul_same_x quantizes it once and must give
// each matrix exactly what its own matmul gives, in every weight mode, with mixed types (a
// Q4_K_M file's v in Q6_K) and a matrix the int8 GEMV does not take (F32).
TEST_CASE("cuda: matmul_same_x equals separate matmuls bit for bit", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int64_t cols = 256;
  const GgmlType types[3] = {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0};
  const int64_t rows[3] = {96, 32, 32};
  for (int config = 0; config < 4; ++config) {  // the three weight modes, then quantized + batch_invariant
    const CudaWeights mode = config == 1 ? CudaWeights::QuantizedF32 : config == 2 ? CudaWeights::Bf16 : CudaWeights::Quantized;
    CudaBackendOptions opts;
    opts.weights = mode;
    opts.batch_invariant = config == 3;
    CudaBackend gpu(opts);
    gpu.init_kv_cache(small_cache());
    Tensor w[4];
    for (int j = 0; j < 3; ++j) {
      const auto bits = test::random_blocks(types[j], rows[j], cols, 81 + static_cast<uint32_t>(j), kScale);
      w[j] = gpu.upload_weight(bits.data(), types[j], rows[j], cols);
    }
    const auto wf = bf16_values(static_cast<size_t>(16 * cols), 84, 0.1f);
    w[3] = gpu.upload_weight_f32(wf.data(), 16, cols);
    for (int n : {1, 3, 8, 12}) {
      INFO(cuda_weights_name(mode) << (opts.batch_invariant ? " batch-invariant" : "") << " n " << n);
      gpu.begin_step(linear_plan(n));
      Tensor x = activation_from(gpu, bf16_values(static_cast<size_t>(n * cols), 85 + static_cast<uint32_t>(n), 0.5f), n, cols);
      Tensor together[4], alone[4];
      for (int j = 0; j < 4; ++j) {
        together[j] = gpu.alloc(n, w[j].rows);
        alone[j] = gpu.alloc(n, w[j].rows);
        gpu.matmul(w[j], x, alone[j], n);
      }
      const Tensor* ws[4] = {&w[0], &w[1], &w[2], &w[3]};
      Tensor* outs[4] = {&together[0], &together[1], &together[2], &together[3]};
      gpu.matmul_same_x(ws, 4, x, outs, n);
      for (int j = 0; j < 4; ++j) {
        const std::vector<float> a = read_all(gpu, alone[j], n), t = read_all(gpu, together[j], n);
        INFO("matrix " << j);
        CHECK(std::memcmp(a.data(), t.data(), sizeof(float) * a.size()) == 0);
      }
    }
  }
}
