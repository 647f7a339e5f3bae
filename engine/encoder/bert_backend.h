// The BERT encoder forward on a Backend (engine/backend: the CUDA one; the CPU backend runs it
// too, which is how the path itself is tested without a GPU): the weights uploaded once, then
// per pass the batch's embedded rows written up, post-norm layers through the backend's
// matmul, add_bias, add, layer_norm, encoder_attention and gelu_mul, and the last layer's rows
// read back. Pooling and a reranker's head stay with BertModel on the host (a few rows).
// "bert" files only (absolute positions, separate Q/K/V, GELU): nomic-bert's rotary positions
// would need the backend's per-step position data, so it stays on the CPU path.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/encoder/bert_config.h"

namespace pagoda::encoder {

class BertBackendForward {
 public:
  // Uploads `config`'s weights (whose file must outlive this) and buffers for `max_rows` rows.
  // Throws EncoderError for an architecture this path does not run.
  BertBackendForward(const BertConfig& config, std::unique_ptr<Backend> backend, int64_t max_rows);

  int64_t max_rows() const { return max_rows_; }
  const Backend& backend() const { return *backend_; }

  // The last layer's states [n x dim] of rows `embedded` (the token + position + type
  // embedding sums, [n x dim], before the embedding LayerNorm), input b owning rows
  // starts[b] .. starts[b+1]-1; n = starts.back() <= max_rows().
  std::vector<float> hidden_states(const std::vector<float>& embedded, const std::vector<int64_t>& starts);

 private:
  struct Layer {
    Tensor q, q_b, k, k_b, v, v_b, o, o_b, attn_norm, attn_norm_b, up, up_b, down, down_b, out_norm, out_norm_b;
  };
  Tensor matrix(const WeightRef& w);
  Tensor vector(const WeightRef& w);
  // out = w x (+ bias when it has data), n rows.
  void linear(const Tensor& w, const Tensor& b, const Tensor& x, Tensor& out, int64_t n);

  const BertConfig& config_;
  std::unique_ptr<Backend> backend_;
  int64_t max_rows_;
  Tensor embd_norm_, embd_norm_b_;
  std::vector<Layer> layers_;
  Tensor x_, q_, k_, v_, attn_, o_, up_, down_, ones_;
};

}  // namespace pagoda::encoder
