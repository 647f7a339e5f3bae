// The transformer's weights as backend Tensors, looked up by their GGUF names.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_config.h"
#include "engine/model/moe_ffn.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

// Called with (0, n_layers) once the embeddings and output matrix are uploaded, then with
// (l + 1, n_layers) as layer l's are: uploading a large model (packing it on CPU, copying it to
// a GPU) takes seconds to minutes, and the caller shows progress.
using LoadProgress = std::function<void(int layers_done, int n_layers)>;

struct LayerWeights {
  Tensor attn_norm;            // blk.N.attn_norm.weight   [1 x dim], f32
  Tensor wq, wk, wv, wo;       // blk.N.attn_{q,k,v,output}.weight (phi3: row ranges of attn_qkv)
  Tensor bq, bk, bv;           // blk.N.attn_{q,k,v}.bias (qwen2 only) [1 x out], f32
  Tensor q_norm, k_norm;       // blk.N.attn_{q,k}_norm.weight [1 x head_dim], f32 (cfg.qk_norm)
  Tensor post_attn_norm;       // blk.N.post_attention_norm.weight [1 x dim] (cfg.post_norms)
  Tensor post_ffn_norm;        // blk.N.post_ffw_norm.weight [1 x dim] (cfg.post_norms)
  Tensor ffn_norm;             // blk.N.ffn_norm.weight    [1 x dim], f32
  Tensor w_gate, w_up, w_down; // blk.N.ffn_{gate,up,down}.weight (dense FFN; phi3: the halves of ffn_up)
  MoeLayerWeights moe;         // the experts instead, when cfg.n_experts > 0
};

struct ModelWeights {
  Tensor tok_embd;     // token_embd.weight [vocab x dim], any supported type (embed dequantizes)
  Tensor output_norm;  // output_norm.weight [1 x dim], f32
  Tensor output;       // output.weight, or tok_embd when the embeddings are tied
  Tensor rope_freqs;   // rope_freqs.weight [1 x n_rot/2], f32, when cfg.rope_freq_factors is
                       // not empty (data == nullptr otherwise): RopeConfig::freq_factors
  // phi3 LongRoPE divisors [1 x n_rot/2] (cfg.rope_factors_short/long not empty).
  Tensor rope_short, rope_long;
  std::vector<LayerWeights> layers;

  // Looks every tensor up in `file` and uploads it. Matrices keep their GGUF type; norm weights
  // and biases (1-D) are converted to F32 on the host first (the ops take F32 vectors), which is
  // why this object owns `host_f32`. Throws ModelConfigError naming a missing tensor or one with
  // the wrong shape. `on_layer`, when given, hears the progress (LoadProgress).
  static ModelWeights load(const gguf::GgufFile& file, const ModelConfig& cfg, Backend& backend,
                           const LoadProgress& on_layer = {});

  std::vector<std::vector<float>> host_f32;  // storage behind the converted 1-D tensors (CPU views)
};

}  // namespace pagoda
