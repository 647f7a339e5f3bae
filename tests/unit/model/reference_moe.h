// The reference forward's mixture-of-experts FFN (double precision, token by token, every
// expert a plain dense FFN), written from llama.cpp's description of the models rather than from
// engine/model/moe_ffn.*: softmax over the router logits, the top-k experts (ties: lower id),
// weights renormalized to sum 1 for llama (Mixtral) and qwen3moe and not for qwen2moe, the weighted sum in
// rank order, then qwen2moe's shared expert scaled by sigmoid(ffn_gate_inp_shexp . x).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"

namespace pagoda::test {

struct TinyModelSpec;

// qwen2moe and qwen3moe always have experts (a llama only when it carries expert_count).
bool arch_has_experts(const std::string& arch);

struct MoeShape {
  int experts = 0, used = 0, ff = 0, shared_ff = 0;
  bool normalize = false;
  // From "<arch>.expert_*" keys (experts == 0 when the model has none).
  static MoeShape read(const gguf::GgufFile& f, const std::string& arch, int dense_ff);
};

struct ReferenceMoe {
  std::vector<double> router, gate, up, down;                  // stacked, expert outermost
  std::vector<double> shared_gate_inp, shared_gate, shared_up, shared_down;
  // `tensor(name)` returns blk.N.<name> dequantized (all rows).
  static ReferenceMoe read(const MoeShape& shape, const std::function<std::vector<double>(const std::string&)>& tensor);
  // The FFN output of every row of x ([n x dim]).
  std::vector<double> forward(const MoeShape& shape, const std::vector<double>& x, int dim) const;
};

// make_tiny_model's MoE keys and a layer's MoE tensors (matrix(name, rows, cols, experts) and
// vec(name, n, lo, hi) write random tensors of the spec's type / F32).
void add_tiny_moe_keys(gguf::GgufWriter& w, const TinyModelSpec& s);
void add_tiny_moe_layer(gguf::GgufWriter& w, const TinyModelSpec& s, const std::string& prefix,
                        const std::function<void(const std::string&, int64_t, int64_t, int64_t)>& matrix,
                        const std::function<void(const std::string&, int64_t, float, float)>& vec);

}  // namespace pagoda::test
