// The mixture-of-experts feed-forward block (Mixtral-style llama, qwen2moe; qwen3moe's is the
// same with normalized top-k): its weights, loaded from GGUF, and its forward over a step's
// tokens. The router runs as one matmul on the backend. Where the backend routes on the device
// (Backend::moe_routes_on_device: the CUDA backend's decode steps) it takes the logits from
// there (Backend::moe_ffn_routed, cpu::moe_route_row's rule); otherwise the logits come back to
// the host, where each token's top-k experts and weights are chosen (cpu::moe_route_row), and
// Backend::moe_ffn runs the chosen experts grouped by expert.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_config.h"

namespace pagoda::gguf { class GgufFile; }

namespace pagoda {

struct MoeLayerWeights {
  // blk.N.ffn_gate_inp.weight as F32 rows (one per expert), then, with a shared expert,
  // blk.N.ffn_gate_inp_shexp.weight as one more row: one matmul gives both. Kept F32 on every
  // backend (Backend::upload_weight_f32), so that all route alike.
  Tensor router;
  ExpertWeights experts;  // blk.N.ffn_{gate,up,down}_exps.weight, in their file type
  Tensor shared_gate, shared_up, shared_down;  // blk.N.ffn_{gate,up,down}_shexp.weight (qwen2moe)
};

// Loads layer `layer`'s MoE weights (shapes were checked by ModelConfig::from_gguf). The router
// is converted to F32 on the host into `host_f32` (which must outlive the backend's use of it).
MoeLayerWeights load_moe_layer(const gguf::GgufFile& file, const ModelConfig& cfg, Backend& backend,
                               int layer, std::vector<std::vector<float>>& host_f32);

class MoeFfn {
 public:
  // Activation buffers for up to `max_tokens` rows.
  MoeFfn(const ModelConfig& cfg, Backend& backend, int64_t max_tokens);

  // out[i] = the MoE FFN of xn[i] for i < n: sum over the token's top-k experts of weight *
  // expert(xn[i]) in rank order, plus sigmoid(gate_shexp . xn[i]) * shared_expert(xn[i]) when
  // the layer has a shared expert (llama.cpp's order of the sum). `out` must not be `xn`.
  void forward(const MoeLayerWeights& w, const Tensor& xn, Tensor& out, int64_t n);
  // Whether forward over n rows of layer w reads nothing back to the host.
  bool on_device(const MoeLayerWeights& w, int64_t n) const { return be_.moe_routes_on_device(w.experts, n); }

 private:
  const ModelConfig& cfg_;
  Backend& be_;
  Tensor logits_;                      // [max_tokens x router rows]
  Tensor sh_gate_, sh_up_, sh_out_;    // the shared expert's activations (when it has one)
  std::vector<float> host_logits_, weights_, shared_weights_;
  std::vector<int32_t> ids_;
};

}  // namespace pagoda
