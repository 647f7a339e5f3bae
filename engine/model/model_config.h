// Model hyper-parameters and architecture, read from GGUF metadata ("<arch>.*" keys).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

enum class Arch { Llama, Qwen2, Qwen2Moe };
const char* arch_name(Arch a);  // "llama", "qwen2", "qwen2moe"

struct ModelConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string name;            // general.name, or the file name
  int n_layers = 0;            // <arch>.block_count
  int dim = 0;                 // <arch>.embedding_length
  int ff_dim = 0;              // <arch>.feed_forward_length
  int n_heads = 0;             // <arch>.attention.head_count
  int n_kv_heads = 0;          // <arch>.attention.head_count_kv (default n_heads)
  int head_dim = 0;            // dim / n_heads (or <arch>.attention.key_length)
  int n_rot = 0;               // <arch>.rope.dimension_count (default head_dim)
  int vocab_size = 0;          // rows of token_embd.weight
  int ctx_train = 0;           // <arch>.context_length
  float rms_eps = 1e-5f;       // <arch>.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scale_linear (or rope.scaling.factor, type linear)
  // rope_freqs.weight (Llama 3.1+ "llama3" scaling, written by llama.cpp's converter): one
  // divisor per rotated pair, n_rot/2 finite positive values; pair i rotates by
  // pos * rope_freq_scale * rope_freq_base^(-2i/n_rot) / rope_freq_factors[i]. Empty: none.
  std::vector<float> rope_freq_factors;
  bool rope_neox = false;      // qwen2: true (NeoX halves); llama: false (pairs)
  bool qkv_bias = false;       // qwen2: Q, K, V projections carry biases
  bool tied_embeddings = false;
  // <arch>.pooling_type as llama.cpp writes it for embedding models: 0 none (absent), 1 mean,
  // 2 CLS, 3 last token, 4 rank (not supported: read as none).
  int pooling_type = 0;  // no output.weight: the LM head reuses token_embd.weight

  // Mixture of experts (engine/model/moe_ffn.h); n_experts == 0: a dense FFN. Each MoE layer
  // has a router (ffn_gate_inp) and stacked experts (ffn_{gate,up,down}_exps); qwen2moe also a
  // shared expert (ffn_{gate,up,down}_shexp) gated by sigmoid(ffn_gate_inp_shexp . x).
  int n_experts = 0;             // <arch>.expert_count
  int n_experts_used = 0;        // <arch>.expert_used_count (top-k)
  int expert_ff_dim = 0;         // <arch>.expert_feed_forward_length (llama: feed_forward_length)
  int shared_expert_ff_dim = 0;  // <arch>.expert_shared_feed_forward_length (qwen2moe; 0: none)
  bool expert_weights_norm = false;  // top-k weights divided by their sum (llama/Mixtral: yes;
                                     // qwen2moe: no)

  // Reads and validates (positive sizes, heads divide dim, n_kv_heads divides n_heads, the
  // tensors the architecture needs are present with the right shapes and supported types, the
  // optional rope_freqs.weight is F32 with n_rot/2 finite positive values).
  // Throws ModelConfigError naming the key or tensor at fault.
  static ModelConfig from_gguf(const gguf::GgufFile& file);
};

}  // namespace pagoda
