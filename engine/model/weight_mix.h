// Which weight type each matrix of a model gets: one type for all of them, or a named mix over a
// base type (q4_k_m: llama.cpp's Q4_K_M rule), and the fallback when a type's block does not
// divide a row. make-model and quantize both ask here, so a mix means the same in both.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/ggml_type.h"

namespace pagoda {

enum class WeightMix {
  None,    // every matrix the base type
  Q4_K_M,  // base Q4_K; Q6_K for the LM head and for the V and FFN-down matrices of some layers
};

const char* weight_mix_name(WeightMix mix);  // "q4_k_m" ("" for None)

// A --type value of make-model and quantize: a plain type ("q8_0") or a mix ("q4_k_m").
struct WeightChoice {
  GgmlType type = GgmlType::F16;  // the type most matrices get (a mix's base)
  WeightMix mix = WeightMix::None;
};

// What a mix looks at besides a tensor's name: the model's shape, from its spec or metadata.
struct WeightMixModel {
  std::string arch;     // general.architecture ("llama", "qwen2", ...)
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int n_experts = 0;    // 0: dense
  bool has_output = true;  // false: the LM head is token_embd.weight (tied), which then gets the
                           // LM head's type
};

// The type a weight matrix with rows of `cols` elements gets when `wanted` is asked for: wanted
// itself when cols is a multiple of its block, else the fallback llama.cpp uses (the 256-element
// types to a 32-element type: Q2_K, Q3_K, IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0), and F16 when even 32 does not divide cols.
GgmlType quantize_fallback_type(GgmlType wanted, int64_t cols);

// The type of weight matrix `name` (GGUF tensor name, rows of `cols` elements) under `choice`,
// the fallback above applied. Q4_K_M, as llama.cpp assigns it (non-Falcon models):
//   - the LM head (output.weight, or token_embd.weight when tied): Q6_K (Q8_0 when cols is not a
//     multiple of the base block);
//   - attn_v and ffn_down (ffn_down_exps / _shexp too) of the "more bits" layers: Q6_K, where
//     layer i of n is one when i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2 (a third of the middle);
//     attn_v of the other layers Q5_K in a 70B-class model (a llama or qwen2 of 80 layers with
//     grouped KV heads: Llama-2/3-70B, Qwen2-72B);
//   - phi3's fused attn_qkv: Q5_K;
//   - with exactly 8 experts: attn_k and attn_v Q8_0, attn_output Q5_K;
//   - every other matrix (token_embd included): Q4_K.
GgmlType weight_type_for(const WeightChoice& choice, const std::string& name, int64_t cols,
                         const WeightMixModel& model);
// The same before the fallback: what the choice asks for that matrix.
GgmlType weight_type_wanted(const WeightChoice& choice, const std::string& name, int64_t cols,
                            const WeightMixModel& model);

}  // namespace pagoda
