// The per-tensor weight types of weight_mix.h: the fallback for rows a block does not divide and
// the Q4_K_M mix (llama.cpp's rule, restated from its description in weight_mix.h).
#include "engine/model/weight_mix.h"

#include <cstdio>

namespace pagoda {

namespace {

// True when `name` contains `part`.
bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// The layer of a "blk.N." tensor, -1 for the others.
int layer_of(const std::string& name) {
  int layer = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 ? layer : -1;
}

// llama.cpp's layers that get more bits in the _M mixes: the first and last eighth, and every
// third layer in between.
bool more_bits_layer(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

GgmlType q4_k_m_type(const std::string& name, int64_t cols, const WeightMixModel& m) {
  const bool lm_head = name == "output.weight" || (!m.has_output && name == "token_embd.weight");
  if (lm_head) return cols % ggml_type_info(GgmlType::Q4_K).block_size == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
  const int layer = layer_of(name);
  const bool more_bits = layer >= 0 && more_bits_layer(layer, m.n_layers);
  if (has(name, "attn_v.weight")) {
    if (m.n_experts == 8) return GgmlType::Q8_0;
    if (more_bits) return GgmlType::Q6_K;
    const bool class_70b = (m.arch == "llama" || m.arch == "qwen2") && m.n_layers == 80 && m.n_kv_heads < m.n_heads;
    return class_70b ? GgmlType::Q5_K : GgmlType::Q4_K;
  }
  if (has(name, "attn_k.weight") && m.n_experts == 8) return GgmlType::Q8_0;
  if (has(name, "attn_output.weight") && m.n_experts == 8) return GgmlType::Q5_K;
  if (has(name, "attn_qkv.weight")) return GgmlType::Q5_K;
  if (has(name, "ffn_down") && more_bits) return GgmlType::Q6_K;
  return GgmlType::Q4_K;
}

}  // namespace

const char* weight_mix_name(WeightMix mix) { return mix == WeightMix::Q4_K_M ? "q4_k_m" : ""; }

GgmlType quantize_fallback_type(GgmlType wanted, int64_t cols) {
  auto fits = [&](GgmlType t) { return cols % ggml_type_info(t).block_size == 0; };
  if (fits(wanted)) return wanted;
  GgmlType next = GgmlType::F16;
  switch (wanted) {
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::IQ4_XS: next = GgmlType::IQ4_NL; break;
    case GgmlType::Q4_K: next = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: next = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: next = GgmlType::Q8_0; break;
    default: break;
  }
  return fits(next) ? next : GgmlType::F16;
}

GgmlType weight_type_wanted(const WeightChoice& choice, const std::string& name, int64_t cols,
                            const WeightMixModel& model) {
  return choice.mix == WeightMix::Q4_K_M ? q4_k_m_type(name, cols, model) : choice.type;
}

GgmlType weight_type_for(const WeightChoice& choice, const std::string& name, int64_t cols,
                         const WeightMixModel& model) {
  return quantize_fallback_type(weight_type_wanted(choice, name, cols, model), cols);
}

}  // namespace pagoda
