// A Backend decorator that forwards every Backend op to an inner backend, each op run through
// one hook (around) that a subclass overrides to observe it (the decode-step benchmark times
// ops with it). Every virtual of engine/backend/backend.h is overridden here, so a wrapper
// never falls back to Backend's "not supported" defaults; test_forwarding_backend checks that
// backend.h declares no virtual this file does not override, so a new op cannot be missed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"

namespace pagoda::test {

class ForwardingBackend : public Backend {
 public:
  // What an op does, for a subclass that tallies ops by kind.
  enum class Op { StepSetup, Embed, Norm, Matmul, Elementwise, Rope, Attention, Moe, Read, KvBlock, Sampling };

  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}

  std::string name() const override { return in_->name(); }
  MemoryInfo memory_info() const override { return in_->memory_info(); }
  Tensor upload_weight(const void* host, GgmlType t, int64_t rows, int64_t cols) override {
    return in_->upload_weight(host, t, rows, cols);
  }
  Tensor upload_weight_f32(const float* host, int64_t rows, int64_t cols) override {
    return in_->upload_weight_f32(host, rows, cols);
  }
  Tensor alloc(int64_t rows, int64_t cols) override { return in_->alloc(rows, cols); }
  size_t kv_block_bytes(const KvCacheConfig& cfg) const override { return in_->kv_block_bytes(cfg); }
  void init_kv_cache(const KvCacheConfig& cfg) override { in_->init_kv_cache(cfg); }

  void begin_step(const StepPlan& plan) override { around(Op::StepSetup, [&] { in_->begin_step(plan); }); }
  void apply_cache_edits(const RopeConfig& r) override { around(Op::StepSetup, [&] { in_->apply_cache_edits(r); }); }
  void apply_cache_edits_per_layer(const std::vector<RopeConfig>& r) override {
    around(Op::StepSetup, [&] { in_->apply_cache_edits_per_layer(r); });
  }

  void embed(const Tensor& table, Tensor& out) override { around(Op::Embed, [&] { in_->embed(table, out); }); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& out, int64_t n) override {
    around(Op::Norm, [&] { in_->rms_norm(x, w, eps, out, n); });
  }
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override {
    around(Op::Matmul, [&] { in_->matmul(w, x, out, n); });
  }
  void matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) override {
    around(Op::Matmul, [&] { in_->matmul_same_x(w, count, x, out, n); });
  }
  void add_bias(Tensor& x, const Tensor& b, int64_t n) override { around(Op::Elementwise, [&] { in_->add_bias(x, b, n); }); }
  void add(Tensor& x, const Tensor& y, int64_t n) override { around(Op::Elementwise, [&] { in_->add(x, y, n); }); }
  void silu_mul(const Tensor& g, const Tensor& u, Tensor& out, int64_t n) override {
    around(Op::Elementwise, [&] { in_->silu_mul(g, u, out, n); });
  }
  void rope(Tensor& x, int n_heads, const RopeConfig& r) override { around(Op::Rope, [&] { in_->rope(x, n_heads, r); }); }
  void store_kv(int layer, const Tensor& k, const Tensor& v) override {
    around(Op::Attention, [&] { in_->store_kv(layer, k, v); });
  }
  void attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads, int head_dim,
                 float scale) override {
    around(Op::Attention, [&] { in_->attention(layer, q, out, n_heads, n_kv_heads, head_dim, scale); });
  }
  void attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads, int head_dim, float scale,
                     const AttentionExtras& extras) override {
    around(Op::Attention, [&] { in_->attention_ext(layer, q, out, n_heads, n_kv_heads, head_dim, scale, extras); });
  }
  void scale(Tensor& x, float s, int64_t n) override { around(Op::Elementwise, [&] { in_->scale(x, s, n); }); }
  void gelu_mul(const Tensor& g, const Tensor& u, Tensor& out, int64_t n) override {
    around(Op::Elementwise, [&] { in_->gelu_mul(g, u, out, n); });
  }
  void softcap(Tensor& x, float cap, int64_t n) override { around(Op::Elementwise, [&] { in_->softcap(x, cap, n); }); }
  void gather_logit_rows(const Tensor& x, Tensor& out) override {
    around(Op::Elementwise, [&] { in_->gather_logit_rows(x, out); });
  }
  // The fused ops run as Backend's composition of the ops above, each through the hook, so that
  // a tally by kind (the decode-step benchmark's) still sees norms, adds, matmuls and RoPE apart;
  // the inner backend's fused forms are therefore not used through this wrapper.
  void add_rms_norm(Tensor& x, const Tensor* residual, const Tensor& w, float eps, Tensor& out, int64_t n) override {
    Backend::add_rms_norm(x, residual, w, eps, out, n);
  }
  void add_rms_norm_matmuls(Tensor& x, const Tensor* residual, const Tensor& norm, float eps, Tensor& xn,
                            const Tensor* const* w, int count, Tensor* const* out, int64_t n) override {
    Backend::add_rms_norm_matmuls(x, residual, norm, eps, xn, w, count, out, n);
  }
  void rope_store_kv(int layer, Tensor& q, Tensor& k, const Tensor& v, int n_heads, int n_kv_heads,
                     const RopeConfig& r) override {
    Backend::rope_store_kv(layer, q, k, v, n_heads, n_kv_heads, r);
  }
  bool moe_routes_on_device(const ExpertWeights& w, int64_t n) const override {
    return in_->moe_routes_on_device(w, n);
  }
  void moe_ffn_routed(const ExpertWeights& w, const Tensor& x, const Tensor& logits, int k, bool normalize,
                      const Tensor* shared, Tensor& out, int64_t n) override {
    around(Op::Moe, [&] { in_->moe_ffn_routed(w, x, logits, k, normalize, shared, out, n); });
  }
  void moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts, const float* weights, int k,
               const Tensor* shared, const float* shared_weights, Tensor& out, int64_t n) override {
    around(Op::Moe, [&] { in_->moe_ffn(w, x, experts, weights, k, shared, shared_weights, out, n); });
  }
  bool supports_lora() const override { return in_->supports_lora(); }
  void lora_add(const LoraRows& group, const Tensor& x, Tensor& out) override {
    around(Op::Matmul, [&] { in_->lora_add(group, x, out); });
  }

  void read_kv_block(int layer, int block, float* k, float* v) override {
    around(Op::KvBlock, [&] { in_->read_kv_block(layer, block, k, v); });
  }
  void write_kv_block(int layer, int block, const float* k, const float* v) override {
    around(Op::KvBlock, [&] { in_->write_kv_block(layer, block, k, v); });
  }
  void read(const Tensor& x, int64_t rows, float* host) override { around(Op::Read, [&] { in_->read(x, rows, host); }); }
  void write(Tensor& x, const float* host, int64_t n) override { around(Op::Embed, [&] { in_->write(x, host, n); }); }
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out, int64_t n) override {
    around(Op::Norm, [&] { in_->layer_norm(x, weight, bias, eps, out, n); });
  }
  void encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const std::vector<int64_t>& starts,
                         int n_heads, int head_dim) override {
    around(Op::Attention, [&] { in_->encoder_attention(q, k, v, out, starts, n_heads, head_dim); });
  }
  size_t kv_block_raw_bytes() const override { return in_->kv_block_raw_bytes(); }
  void read_kv_block_raw(int block, void* out) override { around(Op::KvBlock, [&] { in_->read_kv_block_raw(block, out); }); }
  void write_kv_block_raw(int block, const void* data) override {
    around(Op::KvBlock, [&] { in_->write_kv_block_raw(block, data); });
  }

  bool can_sample() const override { return in_->can_sample(); }
  int logits_chunk_rows() const override { return in_->logits_chunk_rows(); }
  void begin_sampling(const std::vector<SampleRequest>& draws) override {
    around(Op::Sampling, [&] { in_->begin_sampling(draws); });
  }
  void sample(const Tensor& logits, int64_t row_base, int64_t first_draw, int64_t n_draws) override {
    around(Op::Sampling, [&] { in_->sample(logits, row_base, first_draw, n_draws); });
  }
  bool sample_greedy_matmul(const Tensor& w, const Tensor& x, int64_t rows, int64_t row_base, int64_t first_draw,
                            int64_t n_draws) override {
    bool done = false;  // mostly the LM head's matmul: timed as one
    around(Op::Matmul, [&] { done = in_->sample_greedy_matmul(w, x, rows, row_base, first_draw, n_draws); });
    return done;
  }
  void finish_sampling(int32_t* ids, DrawLogprobs* logprobs) override {
    around(Op::Sampling, [&] { in_->finish_sampling(ids, logprobs); });
  }
  void run_host_tasks(int64_t n, const std::function<void(int64_t)>& fn) override { in_->run_host_tasks(n, fn); }
  bool replay_recorded() override { return in_->replay_recorded(); }
  void end_recordable() override { in_->end_recordable(); }
  int64_t recorded_rows(int64_t n) const override { return in_->recorded_rows(n); }

 protected:
  // Runs one forwarded op (the default: just runs it).
  virtual void around(Op op, const std::function<void()>& call) { call(); }
  Backend& inner() { return *in_; }

 private:
  std::unique_ptr<Backend> in_;
};

}  // namespace pagoda::test
