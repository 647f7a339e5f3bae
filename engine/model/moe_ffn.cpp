// Mixture-of-experts FFN: weight loading and the forward (router on the backend, top-k on the
// backend where it can (Backend::moe_ffn_routed), else on the host, experts grouped by
// Backend::moe_ffn). See moe_ffn.h.
#include "engine/model/moe_ffn.h"

#include <cmath>
#include <string>

#include "engine/gguf/gguf.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/quants.h"

namespace pagoda {
namespace {

const gguf::TensorInfo& tensor(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw ModelConfigError(f.path() + ": missing tensor '" + name + "'");
  return *t;
}

// A GGUF tensor of rows of `cols` (any number of dimensions), uploaded in its own type.
Tensor upload_rows(const gguf::GgufFile& f, Backend& be, const std::string& name, int64_t cols) {
  const gguf::TensorInfo& t = tensor(f, name);
  return be.upload_weight(f.tensor_data(t), t.type, t.n_elements() / cols, cols);
}

// Appends the rows of a tensor, dequantized to F32, to `dst`.
void append_f32(const gguf::GgufFile& f, const std::string& name, int64_t cols, std::vector<float>& dst) {
  const gguf::TensorInfo& t = tensor(f, name);
  const int64_t rows = t.n_elements() / cols;
  const size_t row_bytes = ggml_row_size(t.type, cols);
  const size_t at = dst.size();
  dst.resize(at + static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    cpu::dequantize_row(t.type, f.tensor_data(t) + static_cast<size_t>(r) * row_bytes,
                        dst.data() + at + static_cast<size_t>(r * cols), cols);
}

}  // namespace

MoeLayerWeights load_moe_layer(const gguf::GgufFile& file, const ModelConfig& cfg, Backend& backend,
                               int layer, std::vector<std::vector<float>>& host_f32) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t dim = cfg.dim;
  MoeLayerWeights w;
  std::vector<float>& router = host_f32.emplace_back();
  append_f32(file, p + "ffn_gate_inp.weight", dim, router);
  if (cfg.shared_expert_ff_dim > 0) append_f32(file, p + "ffn_gate_inp_shexp.weight", dim, router);
  w.router = backend.upload_weight_f32(router.data(), static_cast<int64_t>(router.size()) / dim, dim);
  w.experts.n_experts = cfg.n_experts;
  w.experts.gate = upload_rows(file, backend, p + "ffn_gate_exps.weight", dim);
  w.experts.up = upload_rows(file, backend, p + "ffn_up_exps.weight", dim);
  w.experts.down = upload_rows(file, backend, p + "ffn_down_exps.weight", cfg.expert_ff_dim);
  if (cfg.shared_expert_ff_dim > 0) {
    w.shared_gate = upload_rows(file, backend, p + "ffn_gate_shexp.weight", dim);
    w.shared_up = upload_rows(file, backend, p + "ffn_up_shexp.weight", dim);
    w.shared_down = upload_rows(file, backend, p + "ffn_down_shexp.weight", cfg.shared_expert_ff_dim);
  }
  return w;
}

MoeFfn::MoeFfn(const ModelConfig& cfg, Backend& backend, int64_t max_tokens) : cfg_(cfg), be_(backend) {
  const bool shared = cfg.shared_expert_ff_dim > 0;
  logits_ = be_.alloc(max_tokens, cfg.n_experts + (shared ? 1 : 0));
  if (shared) {
    sh_gate_ = be_.alloc(max_tokens, cfg.shared_expert_ff_dim);
    sh_up_ = be_.alloc(max_tokens, cfg.shared_expert_ff_dim);
    sh_out_ = be_.alloc(max_tokens, cfg.dim);
  }
}

void MoeFfn::forward(const MoeLayerWeights& w, const Tensor& xn, Tensor& out, int64_t n) {
  if (n <= 0) return;
  const bool shared = w.shared_gate.data != nullptr;
  const int ne = cfg_.n_experts, k = cfg_.n_experts_used;
  const int64_t cols = logits_.cols;
  be_.matmul(w.router, xn, logits_, n);
  if (shared) {  // queued before the read, so a GPU computes it while the host routes
    const Tensor* ws[2] = {&w.shared_gate, &w.shared_up};
    Tensor* outs[2] = {&sh_gate_, &sh_up_};
    be_.matmul_same_x(ws, 2, xn, outs, n);
    be_.silu_mul(sh_gate_, sh_up_, sh_gate_, n);
    be_.matmul(w.shared_down, sh_gate_, sh_out_, n);
  }
  if (be_.moe_routes_on_device(w.experts, n)) {  // no read back: the backend routes
    be_.moe_ffn_routed(w.experts, xn, logits_, k, cfg_.expert_weights_norm, shared ? &sh_out_ : nullptr, out, n);
    return;
  }
  host_logits_.resize(static_cast<size_t>(n * cols));
  be_.read(logits_, n, host_logits_.data());
  ids_.resize(static_cast<size_t>(n * k));
  weights_.resize(static_cast<size_t>(n * k));
  shared_weights_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = host_logits_.data() + i * cols;
    cpu::moe_route_row(row, ne, k, cfg_.expert_weights_norm, ids_.data() + i * k, weights_.data() + i * k);
    if (shared) shared_weights_[static_cast<size_t>(i)] = 1.0f / (1.0f + std::exp(-row[ne]));
  }
  be_.moe_ffn(w.experts, xn, ids_.data(), weights_.data(), k, shared ? &sh_out_ : nullptr,
              shared_weights_.data(), out, n);
}

}  // namespace pagoda
