// CUDA kernels called through their launchers (kernels/cuda/ops.h) on raw device memory:
// weight dequantization and conversion to bf16 against kernels/cpu/quants.h, RoPE and K-shift
// with rope_freqs against kernels/cpu/ops.h (and through CudaBackend against CpuBackend), and
// GPU sampling
// (argmax, temperature, top-k, top-p, min-p, Philox draws) against a host implementation of
// the same rule. The Philox known-answer test runs on the host, with or without a device.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"
#include "engine/model/model_writer.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/philox.h"
#include "tests/gpu/cuda_test_util.h"
#include "tests/support/sample_reference.h"

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

std::vector<int32_t> gpu_sample(const std::vector<float>& logits, int rows, int vocab,
                                const std::vector<DrawParams>& params) {
  DeviceBuf d_logits(logits.size() * sizeof(float)), d_params(params.size() * sizeof(DrawParams)),
      d_out(static_cast<size_t>(rows) * sizeof(int32_t));
  to_device(d_logits, logits);
  to_device(d_params, params);
  cuda::sample(d_logits.as<float>(), rows, vocab, d_params.as<DrawParams>(),
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

TEST_CASE("cuda: dequantization and conversion to bf16 match the CPU reference", "[gpu][cuda_device]") {
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

TEST_CASE("cuda: embedding lookup from F32, F16 and BF16 tables", "[gpu][cuda_device]") {
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

TEST_CASE("cuda: greedy sampling is the argmax, lowest index on ties", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  for (int vocab : {1, 7, 1000, 151936}) {
    const int rows = 5;
    std::vector<float> logits = bf16_values(static_cast<size_t>(rows * vocab), 9 + vocab, 8.0f);
    if (vocab > 3) {  // row 1: a tie between indices 2 and vocab-1 above everything else
      logits[static_cast<size_t>(vocab + 2)] = 100.0f;
      logits[static_cast<size_t>(2 * vocab - 1)] = 100.0f;
    }
    std::vector<DrawParams> params(rows);
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

TEST_CASE("cuda: temperature/top-k/top-p/min-p sampling follows the host rule", "[gpu][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int vocab = 1000;
  std::vector<float> logits;
  std::vector<DrawParams> params;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (float temp : {0.7f, 1.0f, 1.5f})
    for (int top_k : {0, 1, 5, 50})
      for (float top_p : {1.0f, 0.9f, 0.5f})
        for (float min_p : {0.0f, 0.05f})
          for (uint64_t counter = 0; counter < 6; ++counter) {
            for (int j = 0; j < vocab; ++j) logits.push_back(dist(rng));
            DrawParams p;
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
    const int want = test::reference_sample(row.data(), vocab, params[static_cast<size_t>(r)], &ambiguous);
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

TEST_CASE("cuda: sampled frequencies follow the filtered distribution", "[gpu][cuda_device]") {
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
    std::vector<DrawParams> params(rows);
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

// ---- RoPE with frequency factors (GGUF rope_freqs.weight, Llama 3.1) -------------------------

namespace {

// Llama 3.1's factors for n_rot 128 (base 500000), or random divisors in [0.3, 8] otherwise.
std::vector<float> rope_freq_factors_for(int n_rot) {
  if (n_rot == 128) return llama3_rope_freq_factors(128, 500000.0f);
  std::mt19937 rng(static_cast<uint32_t>(n_rot));
  std::uniform_real_distribution<float> d(0.3f, 8.0f);
  std::vector<float> f(static_cast<size_t>(n_rot / 2));
  for (auto& x : f) x = d(rng);
  return f;
}

// The CPU kernels' rotation (kernels/cpu/ops.h) of every head of `rows` rows at `positions`.
std::vector<float> cpu_rope(std::vector<float> x, const std::vector<int32_t>& positions, int n_heads,
                            int head_dim, const cpu::RopeParams& p) {
  std::vector<double> inv(static_cast<size_t>(p.n_rot / 2));
  std::vector<float> c(inv.size()), s(inv.size());
  cpu::rope_inv_freq(p, inv.data());
  for (size_t t = 0; t < positions.size(); ++t) {
    cpu::rope_angles(p, inv.data(), positions[t], c.data(), s.data());
    cpu::rope_apply(x.data() + t * n_heads * head_dim, n_heads, head_dim, p, c.data(), s.data());
  }
  return x;
}

// cuda::rope of `x` at `positions`, with `factors` (empty: none).
std::vector<float> gpu_rope(const std::vector<float>& x, const std::vector<int32_t>& positions,
                            int n_heads, int head_dim, const cpu::RopeParams& p,
                            const std::vector<float>& factors) {
  DeviceBuf d_x(x.size() * sizeof(float)), d_pos(positions.size() * sizeof(int32_t)),
      d_ff(std::max<size_t>(1, factors.size()) * sizeof(float));
  to_device(d_x, x);
  to_device(d_pos, positions);
  if (!factors.empty()) to_device(d_ff, factors);
  cuda::rope(d_x.as<float>(), d_pos.as<int32_t>(), static_cast<int64_t>(positions.size()), n_heads,
             head_dim, p.n_rot, p.freq_base, p.freq_scale, p.neox, nullptr,
             factors.empty() ? nullptr : d_ff.as<float>());
  return from_device<float>(d_x, x.size());
}

}  // namespace

TEST_CASE("cuda: rope with rope_freqs matches the CPU kernels", "[gpu][rope_freqs][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int head_dim = 128, n_heads = 3;
  const std::vector<int32_t> positions = {0, 1, 7, 3000, 8191, 131000};
  for (bool neox : {false, true}) {
    for (int n_rot : {128, 64}) {
      INFO("neox " << neox << " n_rot " << n_rot);
      const std::vector<float> ff = rope_freq_factors_for(n_rot);
      const cpu::RopeParams p{n_rot, 500000.0f, neox ? 0.5f : 1.0f, neox, ff.data()};
      const auto x = bf16_values(positions.size() * n_heads * head_dim, 31 + n_rot);
      const auto want = cpu_rope(x, positions, n_heads, head_dim, p);
      require_close(gpu_rope(x, positions, n_heads, head_dim, p, ff), want, 1e-5f, 1e-5f, "rope");
      // The factors change the result (so the comparison above could fail).
      cpu::RopeParams plain = p;
      plain.freq_factors = nullptr;
      const auto without = cpu_rope(x, positions, n_heads, head_dim, plain);
      double diff = 0;
      for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, double(std::fabs(want[i] - without[i])));
      CHECK(diff > 1e-3);
    }
  }
}

TEST_CASE("cuda: k_shift with rope_freqs matches the CPU and roping at the new position", "[gpu][rope_freqs][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int n_layers = 2, num_blocks = 4, bs = 16, n_kv = 2, head_dim = 128;
  const int64_t row = n_kv * head_dim, block_elems = bs * row, layer_elems = num_blocks * block_elems;
  const std::vector<int32_t> shifts = {1, -64, 3, 1000};  // (block, delta) pairs
  for (bool neox : {false, true}) {
    for (int n_rot : {128, 64}) {
      INFO("neox " << neox << " n_rot " << n_rot);
      const std::vector<float> ff = rope_freq_factors_for(n_rot);
      const cpu::RopeParams p{n_rot, 500000.0f, 1.0f, neox, ff.data()};
      // Block b of layer l holds K rows roped at positions 100 * (b + 1) + slot.
      const auto raw = bf16_values(static_cast<size_t>(n_layers * layer_elems), 41 + n_rot);
      std::vector<int32_t> pos_of_row;
      for (int l = 0; l < n_layers; ++l)
        for (int b = 0; b < num_blocks; ++b)
          for (int s = 0; s < bs; ++s) pos_of_row.push_back(100 * (b + 1) + s);
      const auto roped = gpu_rope(raw, pos_of_row, n_kv, head_dim, p, ff);
      std::vector<uint16_t> k16(roped.size());
      for (size_t i = 0; i < roped.size(); ++i) k16[i] = cpu::fp32_to_fp16(roped[i]);

      DeviceBuf d_k(k16.size() * 2), d_v(k16.size() * 2), d_shifts(shifts.size() * 4),
          d_ff(ff.size() * sizeof(float));
      to_device(d_k, k16);
      to_device(d_v, k16);
      to_device(d_shifts, shifts);
      to_device(d_ff, ff);
      cuda::KvPools pools;
      pools.k_base = d_k.p;
      pools.v_base = d_v.p;
      pools.k_layer_stride = layer_elems;
      pools.v_layer_stride = layer_elems;
      pools.n_layers = n_layers;
      pools.block_size = bs;
      pools.n_kv_heads = n_kv;
      pools.head_dim = head_dim;
      cuda::k_shift(pools, d_shifts.as<int32_t>(), 2, n_rot, p.freq_base, p.freq_scale, neox, nullptr,
                    d_ff.as<float>());
      const auto got16 = from_device<uint16_t>(d_k, k16.size());
      CHECK(from_device<uint16_t>(d_v, k16.size()) == k16);  // V untouched

      // CPU oracle: the same shifts by kv_rope_block on a host copy of the pools.
      std::vector<uint16_t> host = k16;
      std::vector<float> c(static_cast<size_t>(n_rot / 2)), s(c.size());
      std::vector<double> inv(c.size());
      cpu::rope_inv_freq(p, inv.data());
      for (size_t j = 0; j < shifts.size(); j += 2) {
        cpu::rope_angles(p, inv.data(), shifts[j + 1], c.data(), s.data());
        for (int l = 0; l < n_layers; ++l) {
          cpu::KvPool kp;
          kp.data = host.data() + l * layer_elems;
          kp.type = GgmlType::F16;
          kp.block_size = bs;
          kp.n_kv_heads = n_kv;
          kp.head_dim = head_dim;
          kp.num_blocks = num_blocks;
          cpu::kv_rope_block(kp, shifts[j], p, c.data(), s.data());
        }
      }
      std::vector<float> got(got16.size()), cpu_k(got16.size());
      for (size_t i = 0; i < got.size(); ++i) {
        got[i] = cpu::fp16_to_fp32(got16[i]);
        cpu_k[i] = cpu::fp16_to_fp32(host[i]);
      }
      require_close(got, cpu_k, 1e-3f, 1e-3f, "K vs CPU");  // one f16 ulp

      // The invariant: a shifted block reads as its rows roped directly at position + delta.
      for (size_t j = 0; j < shifts.size(); j += 2) {
        const int blk = shifts[j], delta = shifts[j + 1];
        for (int l = 0; l < n_layers; ++l) {
          const int64_t off = l * layer_elems + blk * block_elems;
          const std::vector<float> rows(raw.begin() + off, raw.begin() + off + block_elems);
          std::vector<int32_t> moved;
          for (int sl = 0; sl < bs; ++sl) moved.push_back(100 * (blk + 1) + sl + delta);
          const auto direct = gpu_rope(rows, moved, n_kv, head_dim, p, ff);
          const std::vector<float> shifted(got.begin() + off, got.begin() + off + block_elems);
          INFO("block " << blk << " layer " << l);
          require_close(shifted, direct, 2e-3f, 2e-3f, "shifted K vs K roped at the new position");
        }
      }
    }
  }
}

TEST_CASE("cuda: CudaBackend rope and K-shift use RopeConfig::freq_factors as the CPU backend does",
          "[gpu][rope_freqs][cuda_device]") {
  PAGODA_SKIP_WITHOUT_CUDA();
  const int bs = 16, n_kv = 2, head_dim = 128, row = n_kv * head_dim;
  const std::vector<float> ff = llama3_rope_freq_factors(head_dim, 500000.0f);
  for (bool neox : {false, true}) {
    INFO("neox " << neox);
    CpuBackend cpu(2);
    std::unique_ptr<Backend> gpu = make_cuda_backend();
    Backend* both[2] = {&cpu, gpu.get()};
    const auto kv = bf16_values(static_cast<size_t>(bs * row), 53 + neox);
    TestSeq seq;  // 16 tokens at positions 96..111: exactly block 6
    seq.n_past = 96;
    seq.n_new = bs;
    seq.blocks = {0, 1, 2, 3, 4, 5, 6};
    StepPlan shift;
    shift.k_shifts = {KShift{6, -96}};
    std::vector<float> roped[2], shifted[2], direct[2];
    for (int i = 0; i < 2; ++i) {
      Backend& b = *both[i];
      b.init_kv_cache(KvCacheConfig{1, 8, bs, n_kv, head_dim, GgmlType::F16});
      RopeConfig rc;
      rc.head_dim = head_dim;
      rc.freq_base = 500000.0f;
      rc.neox = neox;
      rc.freq_factors = b.upload_weight(ff.data(), GgmlType::F32, 1, static_cast<int64_t>(ff.size()));
      b.begin_step(make_plan({seq}, bs));
      Tensor k = activation_from(b, kv, bs, row);
      b.rope(k, n_kv, rc);
      roped[i] = read_all(b, k, bs);
      b.store_kv(0, k, k);
      b.begin_step(shift);
      b.apply_cache_edits(rc);
      std::vector<float> v(static_cast<size_t>(bs * row));
      shifted[i].resize(v.size());
      b.read_kv_block(0, 6, shifted[i].data(), v.data());
      // The same rows roped directly at their new positions 0..15.
      TestSeq moved = seq;
      moved.n_past = 0;
      b.begin_step(make_plan({moved}, bs));
      Tensor d = activation_from(b, kv, bs, row);
      b.rope(d, n_kv, rc);
      direct[i] = read_all(b, d, bs);
    }
    require_close(roped[1], roped[0], 1e-5f, 1e-5f, "rope");
    require_close(shifted[1], shifted[0], 1e-3f, 1e-3f, "shifted K");  // one f16 ulp
    require_close(shifted[1], direct[1], 2e-3f, 2e-3f, "shifted K vs K roped at the new position");
  }
}
