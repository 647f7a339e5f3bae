// BertBackendForward: weight upload and the layer loop on a Backend; see bert_backend.h.
#include "engine/encoder/bert_backend.h"

#include <string>

namespace pagoda::encoder {

BertBackendForward::BertBackendForward(const BertConfig& config, std::unique_ptr<Backend> backend, int64_t max_rows)
    : config_(config), backend_(std::move(backend)), max_rows_(max_rows) {
  if (config.arch != EncoderArch::Bert)
    throw EncoderError("nomic-bert encoders run on the CPU only (" + backend_->name() + " runs bert files)");
  if (max_rows <= 0) throw EncoderError("the encoder's backend buffers need at least one row");
  embd_norm_ = vector(config.embd_norm);
  embd_norm_b_ = vector(config.embd_norm_b);
  for (const BertLayer& L : config.layers) {
    Layer l;
    l.q = matrix(L.q), l.q_b = vector(L.q_b), l.k = matrix(L.k), l.k_b = vector(L.k_b);
    l.v = matrix(L.v), l.v_b = vector(L.v_b), l.o = matrix(L.o), l.o_b = vector(L.o_b);
    l.attn_norm = vector(L.attn_norm), l.attn_norm_b = vector(L.attn_norm_b);
    l.up = matrix(L.up), l.up_b = vector(L.up_b), l.down = matrix(L.down), l.down_b = vector(L.down_b);
    l.out_norm = vector(L.out_norm), l.out_norm_b = vector(L.out_norm_b);
    layers_.push_back(l);
  }
  const int64_t d = config.dim, ff = config.ff_dim;
  x_ = backend_->alloc(max_rows, d), q_ = backend_->alloc(max_rows, d), k_ = backend_->alloc(max_rows, d);
  v_ = backend_->alloc(max_rows, d), attn_ = backend_->alloc(max_rows, d), o_ = backend_->alloc(max_rows, d);
  up_ = backend_->alloc(max_rows, ff), down_ = backend_->alloc(max_rows, d);
  // gelu_mul's `up` operand: GELU alone is GELU times ones. Written into an activation buffer
  // (upload_weight may keep the host pointer: the CPU backend uses weights in place).
  const std::vector<float> ones(size_t(max_rows * ff), 1.0f);
  ones_ = backend_->alloc(max_rows, ff);
  backend_->write(ones_, ones.data(), max_rows);
}

Tensor BertBackendForward::matrix(const WeightRef& w) {
  return w.data == nullptr ? Tensor{} : backend_->upload_weight(w.data, w.type, w.rows, w.cols);
}

Tensor BertBackendForward::vector(const WeightRef& w) {
  return w.data == nullptr ? Tensor{}
                           : backend_->upload_weight_f32(static_cast<const float*>(w.data), 1, w.rows * w.cols);
}

void BertBackendForward::linear(const Tensor& w, const Tensor& b, const Tensor& x, Tensor& out, int64_t n) {
  backend_->matmul(w, x, out, n);
  if (b.data != nullptr) backend_->add_bias(out, b, n);
}

std::vector<float> BertBackendForward::hidden_states(const std::vector<float>& embedded,
                                                     const std::vector<int64_t>& starts) {
  const int64_t n = starts.back(), d = config_.dim;
  if (n > max_rows_)
    throw EncoderError("a pass of " + std::to_string(n) + " rows exceeds the backend buffers' " +
                       std::to_string(max_rows_));
  Backend& be = *backend_;
  be.write(x_, embedded.data(), n);
  be.layer_norm(x_, embd_norm_, embd_norm_b_, config_.eps, x_, n);
  for (Layer& l : layers_) {
    linear(l.q, l.q_b, x_, q_, n);
    linear(l.k, l.k_b, x_, k_, n);
    linear(l.v, l.v_b, x_, v_, n);
    be.encoder_attention(q_, k_, v_, attn_, starts, config_.n_heads, int(d / config_.n_heads));
    linear(l.o, l.o_b, attn_, o_, n);
    be.add(x_, o_, n);
    be.layer_norm(x_, l.attn_norm, l.attn_norm_b, config_.eps, x_, n);
    linear(l.up, l.up_b, x_, up_, n);
    be.gelu_mul(up_, ones_, up_, n);
    linear(l.down, l.down_b, up_, down_, n);
    be.add(x_, down_, n);
    be.layer_norm(x_, l.out_norm, l.out_norm_b, config_.eps, x_, n);
  }
  std::vector<float> h(size_t(n * d));
  be.read(x_, n, h.data());
  return h;
}

}  // namespace pagoda::encoder
