// Model hyper-parameters and architecture, read from GGUF metadata ("<arch>.*" keys).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

enum class Arch { Llama, Qwen2, Qwen3, Gemma2, Gemma3, Phi3, Qwen2Moe, Qwen3Moe };
const char* arch_name(Arch a);  // "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "qwen2moe",
                                 // "qwen3moe"

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
  bool rope_neox = false;      // qwen2/qwen3/gemma/phi3: true (NeoX halves); llama: false (pairs)
  bool qkv_bias = false;       // qwen2: Q, K, V projections carry biases
  // blk.N.attn_{q,k}_norm.weight [head_dim]: an RMSNorm over each Q and K head before RoPE
  // (qwen3, gemma3; any architecture whose layers carry them reuses it through this flag).
  bool qk_norm = false;
  // Gemma's sandwich norms: blk.N.post_attention_norm / post_ffw_norm applied to the attention
  // and FFN outputs before each residual add.
  bool post_norms = false;
  bool gelu_ffn = false;       // gate activation: tanh-approximated GELU (gemma) instead of SiLU
  // phi3: one blk.N.attn_qkv.weight [q_dim + 2 kv_dim rows] and one blk.N.ffn_up.weight holding
  // gate then up [2 ff rows] instead of the separate matrices.
  bool fused_qkv = false;
  bool fused_gate_up = false;
  float embed_scale = 1.0f;    // embeddings times this (gemma: sqrt(dim))
  float attn_scale = 0.0f;     // attention logits times this (1/sqrt(head_dim) unless the arch says)
  float attn_softcap = 0.0f;   // <arch>.attn_logit_softcapping: cap * tanh(s / cap); 0 = none
  float final_softcap = 0.0f;  // <arch>.final_logit_softcapping on the LM head's logits; 0 = none
  // Sliding-window attention: a local layer's token at position p attends only to positions
  // p - sliding_window + 1 .. p. layer_window[l] is that W for layer l, 0 for a global layer.
  int sliding_window = 0;      // <arch>.attention.sliding_window (0: none)
  std::vector<int> layer_window;
  // gemma3: local layers rotate with their own base (<arch>.rope.freq_base_swa, default 10000)
  // and without the linear scaling of the global layers.
  float rope_freq_base_local = 0.0f;  // 0: local layers use rope_freq_base
  // phi3 LongRoPE: per-pair divisors rope_factors_short/long.weight, the long ones used when the
  // context a sequence may reach exceeds rope_orig_ctx (as llama.cpp chooses: per-sequence
  // context > <arch>.rope.scaling.original_context_length); both scale cos/sin by
  // rope_attn_factor (<arch>.rope.scaling.attn_factor).
  std::vector<float> rope_factors_short, rope_factors_long;
  int rope_orig_ctx = 0;
  float rope_attn_factor = 1.0f;
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
  bool expert_weights_norm = false;  // top-k weights divided by their sum (llama/Mixtral and
                                     // qwen3moe: yes; qwen2moe: no)

  // Reads and validates (positive sizes, heads divide dim, n_kv_heads divides n_heads, the
  // tensors the architecture needs are present with the right shapes and supported types, the
  // optional rope_freqs.weight is F32 with n_rot/2 finite positive values).
  // Throws ModelConfigError naming the key or tensor at fault.
  static ModelConfig from_gguf(const gguf::GgufFile& file);

  // True when any layer has a window or the attention logits are soft-capped.
  bool attention_extras() const { return attn_softcap > 0 || sliding_window > 0; }
};

}  // namespace pagoda
