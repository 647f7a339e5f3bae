// Test helpers for the forward-pass tests: tiny random-weight GGUF models, and a straightforward
// scalar reference transformer (double precision, contiguous KV, no paging, no batching) that
// reads the same file independently of engine/model.* and engine/model_config.*.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "kernels/ggml_type.h"
#include "tests/unit/model/reference_moe.h"

namespace pagoda::test {

struct TinyModelSpec {
  std::string arch = "llama";  // "llama", "qwen2" (Q/K/V biases, NeoX RoPE) or "qwen2moe"
  int layers = 2;
  int dim = 64;
  int ff = 96;
  int heads = 4;
  int kv_heads = 2;
  int vocab = 97;
  int n_rot = 0;                 // 0: head_dim
  float rope_base = 10000.0f;
  float rope_scale_linear = 0;   // 0: no scaling key
  std::vector<float> rope_freqs; // rope_freqs.weight (n_rot/2 divisors); empty: no tensor
  GgmlType type = GgmlType::F32; // type of the 2-D weight matrices
  bool tied = false;             // no output.weight
  uint64_t seed = 1;
  // Mixture of experts (reference_moe.h): experts > 0 replaces each layer's FFN by a router
  // and stacked experts; qwen2moe always has them, plus a shared expert of width shared_ff.
  int experts = 0;
  int experts_used = 2;
  int expert_ff = 0;             // 0: ff
  int shared_ff = 0;             // qwen2moe; 0: ff
};

// A GGUF image of a random-weight model of that shape (seeded, deterministic). Norm weights
// and biases are F32, matrices of `type`.
std::vector<uint8_t> make_tiny_model(const TinyModelSpec& spec);

class ReferenceModel {
 public:
  // Reads hyper-parameters from the metadata and dequantizes every weight.
  explicit ReferenceModel(const gguf::GgufFile& file);

  // Logits of every position of `tokens` (one sequence from position 0), [n x vocab].
  std::vector<double> forward(const std::vector<int32_t>& tokens) const;
  int vocab() const { return vocab_; }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
    ReferenceMoe moe;  // used when moe_.experts > 0
  };
  std::vector<double> matrix(const gguf::GgufFile& f, const std::string& name) const;

  bool neox_ = false, bias_ = false;
  int layers_ = 0, dim_ = 0, ff_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, n_rot_ = 0, vocab_ = 0;
  double eps_ = 1e-5, base_ = 10000, scale_ = 1;
  std::vector<double> rope_freqs_;  // per-pair frequency divisors; empty: all 1
  std::vector<double> embd_, out_norm_, output_;
  std::vector<Layer> l_;
  MoeShape moe_;  // experts == 0: dense FFN
};

}  // namespace pagoda::test
