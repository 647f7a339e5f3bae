// Decode attention over many sequences and long contexts on the CPU backend: each sequence's
// output is bit for bit the same alone, among 16 sequences of other lengths, and at 1, 2 or 3
// threads (the backend then gives a task one KV head or a run of several), for F16 and Q8_0
// caches; and the kernel over several KV heads at once (attention_heads) against the scalar
// kernel, head by head, at contexts of hundreds of keys (many tiles, so the running max of the
// AVX-512 kernel's online softmax moves).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_impl.h"

using namespace pagoda;

namespace {

constexpr int kBlock = 16;

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One decode token for each of the sequences `which` (sequence s: blocks s * per_seq.., context
// ctx[s]).
StepPlan decode_plan(const std::vector<int>& which, const std::vector<int>& ctx, int per_seq) {
  StepPlan p;
  for (int s : which) {
    SeqInStep seq;
    seq.seq_id = static_cast<uint64_t>(s);
    seq.first_token = p.n_tokens();
    seq.n_tokens = 1;
    seq.n_past = ctx[size_t(s)] - 1;
    seq.block_table_offset = static_cast<int32_t>(p.block_tables.size());
    seq.n_blocks = (ctx[size_t(s)] + kBlock - 1) / kBlock;
    for (int b = 0; b < seq.n_blocks; ++b) p.block_tables.push_back(s * per_seq + b);
    p.logit_rows.push_back(p.n_tokens());
    p.tokens.push_back(0);
    p.positions.push_back(ctx[size_t(s)] - 1);
    p.slots.push_back(s * per_seq * kBlock + ctx[size_t(s)] - 1);
    p.token_seq.push_back(static_cast<int32_t>(p.seqs.size()));
    p.seqs.push_back(seq);
  }
  return p;
}

}  // namespace

TEST_CASE("decode attention of a sequence is bit-identical alone, among 16, at 1-3 threads", "[cpu_ops][attention]") {
  const int n_seqs = 16, n_kv = 8, n_heads = 32, head_dim = 128, per_seq = 24;
  std::vector<int> ctx;
  for (int s = 0; s < n_seqs; ++s) ctx.push_back(1 + (s * 97 + 13) % (per_seq * kBlock - 1));
  std::vector<int> all;
  for (int s = 0; s < n_seqs; ++s) all.push_back(s);
  const size_t block_floats = size_t(kBlock) * n_kv * head_dim, row = size_t(n_heads) * head_dim;
  const auto q_all = uniform(n_seqs * row, 3, -2, 2);
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    INFO("kv " << ggml_type_info(type).name);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      INFO(threads << " thread(s)");
      CpuBackend be(threads);
      be.init_kv_cache(KvCacheConfig{1, n_seqs * per_seq, kBlock, n_kv, head_dim, type});
      for (int b = 0; b < n_seqs * per_seq; ++b) {
        const auto k = uniform(block_floats, 100 + 2 * uint64_t(b), -2, 2), v = uniform(block_floats, 101 + 2 * uint64_t(b), -1, 1);
        be.write_kv_block(0, b, k.data(), v.data());
      }
      Tensor q = be.alloc(n_seqs, int64_t(row)), out = be.alloc(n_seqs, int64_t(row));
      std::memcpy(q.data, q_all.data(), sizeof(float) * q_all.size());
      be.begin_step(decode_plan(all, ctx, per_seq));
      be.attention(0, q, out, n_heads, n_kv, head_dim, 1.0f / std::sqrt(float(head_dim)));
      std::vector<float> batch(n_seqs * row);
      be.read(out, n_seqs, batch.data());
      if (first.empty()) first = batch;
      CHECK(std::memcmp(first.data(), batch.data(), sizeof(float) * batch.size()) == 0);
      for (int s : {0, 5, 11}) {
        INFO("sequence " << s << ", context " << ctx[size_t(s)]);
        Tensor q1 = be.alloc(1, int64_t(row)), out1 = be.alloc(1, int64_t(row));
        std::memcpy(q1.data, q_all.data() + s * row, sizeof(float) * row);
        be.begin_step(decode_plan({s}, ctx, per_seq));
        be.attention(0, q1, out1, n_heads, n_kv, head_dim, 1.0f / std::sqrt(float(head_dim)));
        std::vector<float> alone(row);
        be.read(out1, 1, alone.data());
        CHECK(std::memcmp(alone.data(), batch.data() + s * row, sizeof(float) * row) == 0);
      }
    }
  }
}

TEST_CASE("attention over several KV heads at once: each head as alone, near the scalar kernel", "[cpu_ops][attention]") {
  const int n_kv = 4, g = 4, bs = kBlock, blocks = 40;
  const int32_t table[] = {7, 3, 12, 0, 39, 21, 5, 30, 18, 9, 27, 1, 33, 14, 25, 36, 2, 11, 20, 38, 6, 29, 15, 24};
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0, GgmlType::F32}) {
    for (int head_dim : {64, 128}) {
      INFO("kv " << ggml_type_info(type).name << ", head_dim " << head_dim);
      const size_t slot_floats = size_t(n_kv) * head_dim;
      std::vector<uint8_t> kbuf(size_t(blocks) * bs * n_kv * size_t(kv_head_bytes(type, head_dim))), vbuf(kbuf.size());
      cpu::KvPool kp{kbuf.data(), type, bs, n_kv, head_dim, blocks}, vp{vbuf.data(), type, bs, n_kv, head_dim, blocks};
      const auto kd = uniform(size_t(blocks) * bs * slot_floats, 8, -2, 2), vd = uniform(kd.size(), 9, -1, 1);
      for (int64_t slot = 0; slot < int64_t(blocks) * bs; ++slot) {
        cpu::kv_store_row(kp, slot, kd.data() + size_t(slot) * slot_floats);
        cpu::kv_store_row(vp, slot, vd.data() + size_t(slot) * slot_floats);
      }
      // Two tokens (contexts 370 and 371: 24 tiles), all four KV heads.
      const int n_q = 2, n_ctx = 370, stride = n_kv * g * head_dim;
      const auto q = uniform(size_t(n_q) * stride, 10, -2, 2);
      std::vector<float> scratch(size_t(cpu::attention_scratch_floats(n_q, g, head_dim, n_ctx + n_q, n_kv)));
      std::vector<float> heads(size_t(n_q) * stride), one(heads.size()), scalar(heads.size());
      cpu::AttnRows r{q.data(), stride, heads.data(), stride, n_q, n_ctx};
      cpu::attention_heads(r, g, n_kv, head_dim, 0.25f, kp, vp, 0, table, scratch.data());
      for (int h = 0; h < n_kv; ++h) {
        const int64_t off = int64_t(h) * g * head_dim;
        cpu::AttnRows rh{q.data() + off, stride, one.data() + off, stride, n_q, n_ctx};
        cpu::attention_group(rh, g, head_dim, 0.25f, kp, vp, h, table, scratch.data());
        rh.out = scalar.data() + off;
        cpu::detail::attention_group_portable(rh, g, head_dim, 0.25f, kp, vp, h, table, scratch.data());
      }
      CHECK(std::memcmp(heads.data(), one.data(), sizeof(float) * heads.size()) == 0);
      float worst = 0;
      for (size_t i = 0; i < heads.size(); ++i) worst = std::max(worst, std::fabs(heads[i] - scalar[i]));
      CHECK(worst <= 1e-5f);
    }
  }
}
