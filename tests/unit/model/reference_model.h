// Test helpers for the forward-pass tests: tiny random-weight GGUF models, and a straightforward
// scalar reference transformer (double precision, contiguous KV, no paging, no batching) that
// reads the same file independently of engine/model.* and engine/model_config.*. Architectures:
// llama, qwen2, qwen3, gemma2, gemma3, phi3, written from their published definitions (and
// llama.cpp's GGUF conventions: Gemma norm weights stored as used, phi3's fused matrices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "kernels/ggml_type.h"
#include "tests/unit/model/reference_moe.h"

namespace pagoda::test {

struct TinyModelSpec {
  // "llama", "qwen2" (Q/K/V biases, NeoX RoPE), "qwen3" (per-head Q/K norms), "gemma2" (GeGLU,
  // sandwich norms, soft-capping, local layers 0, 2, ...), "gemma3" (5 local : 1 global, Q/K
  // norms), "phi3" (fused QKV and gate/up, all layers windowed), "qwen2moe" (qwen2 + experts),
  // "qwen3moe" (qwen3 + experts, no shared expert)
  std::string arch = "llama";
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
  bool tied = false;             // no output.weight (always for gemma)
  uint64_t seed = 1;
  int window = 8;                // <arch>.attention.sliding_window (gemma2/gemma3/phi3)
  float attn_softcap = 3.0f;     // gemma2: small caps so that they matter on random weights
  float final_softcap = 4.0f;
  float local_rope_base = 10000.0f;  // gemma3's rope.freq_base_swa
  bool longrope = false;         // phi3: rope_factors_short/long, original context 1024 of 4096
  // Mixture of experts (reference_moe.h): experts > 0 replaces each layer's FFN by a router
  // and stacked experts; qwen2moe and qwen3moe always have them, qwen2moe plus a shared expert
  // of width shared_ff.
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
  // n_ctx: the context a sequence may reach (phi3 picks its long RoPE factors when it exceeds
  // the original context); 0: the file's context_length.
  explicit ReferenceModel(const gguf::GgufFile& file, int n_ctx = 0);

  // Logits of every position of `tokens` (one sequence from position 0), [n x vocab].
  std::vector<double> forward(const std::vector<int32_t>& tokens) const;
  int vocab() const { return vocab_; }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, gate, up, down;
    std::vector<double> q_norm, k_norm, post_attn, post_ffn;  // empty when the arch has none
    int window = 0;                                          // 0: global
    double base = 10000, scale = 1;                          // its RoPE
    ReferenceMoe moe;  // used when moe_.experts > 0
  };
  std::vector<double> matrix(const gguf::GgufFile& f, const std::string& name) const;

  std::string arch_;
  bool neox_ = false, bias_ = false, gemma_ = false;
  double embed_scale_ = 1, attn_scale_ = 0, attn_cap_ = 0, final_cap_ = 0;
  int layers_ = 0, dim_ = 0, ff_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, n_rot_ = 0, vocab_ = 0;
  double eps_ = 1e-5, base_ = 10000, scale_ = 1;
  std::vector<double> rope_freqs_;  // per-pair frequency divisors; empty: all 1
  std::vector<double> embd_, out_norm_, output_;
  std::vector<Layer> l_;
  MoeShape moe_;  // experts == 0: dense FFN
};

}  // namespace pagoda::test
