#include "engine/model/model_weights.h"

#include <string>

#include "engine/gguf/gguf.h"
#include "kernels/cpu/quants.h"

namespace pagoda {
namespace {

class Loader {
 public:
  Loader(const gguf::GgufFile& file, Backend& backend, ModelWeights& out)
      : file_(file), backend_(backend), out_(out) {}

  const gguf::TensorInfo* find(const std::string& name) const { return file_.find_tensor(name); }

  // A [rows x cols] matrix (ggml dims {cols, rows}) kept in its file type.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols) {
    return matrix_part(name, rows, cols, 0, rows);
  }

  // Rows [first, first + n) of a [rows x cols] matrix, as a matrix of its own (a fused
  // matrix's parts: each output row depends on its own weight row only).
  Tensor matrix_part(const std::string& name, int64_t rows, int64_t cols, int64_t first, int64_t n) {
    const gguf::TensorInfo& t = get(name);
    if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
      throw ModelConfigError("tensor " + name + ": expected shape [" + std::to_string(cols) + ", " +
                             std::to_string(rows) + "], got " + shape(t));
    check_type(t);
    const size_t offset = ggml_row_size(t.type, cols) * static_cast<size_t>(first);
    return backend_.upload_weight(file_.tensor_data(t) + offset, t.type, n, cols);
  }

  // A vector of n elements, converted to F32.
  Tensor vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo& t = get(name);
    if (t.n_elements() != n || t.dims.empty() || t.dims[0] != n)
      throw ModelConfigError("tensor " + name + ": expected " + std::to_string(n) +
                             " elements, got " + shape(t));
    check_type(t);
    std::vector<float>& host = out_.host_f32.emplace_back(static_cast<size_t>(n));
    cpu::dequantize_row(t.type, file_.tensor_data(t), host.data(), n);
    return backend_.upload_weight(host.data(), GgmlType::F32, 1, n);
  }

 private:
  const gguf::TensorInfo& get(const std::string& name) const {
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (!t) throw ModelConfigError("missing tensor " + name);
    return *t;
  }
  static void check_type(const gguf::TensorInfo& t) {
    const GgmlTypeInfo& info = ggml_type_info(t.type);
    if (!info.supported)
      throw ModelConfigError("tensor " + t.name + ": unsupported type " + info.name);
  }
  static std::string shape(const gguf::TensorInfo& t) {
    std::string s = "[";
    for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims[i]);
    return s + "]";
  }

  const gguf::GgufFile& file_;
  Backend& backend_;
  ModelWeights& out_;
};

}  // namespace

ModelWeights ModelWeights::load(const gguf::GgufFile& file, const ModelConfig& cfg, Backend& backend,
                                const LoadProgress& on_layer) {
  ModelWeights w;
  Loader ld(file, backend, w);
  const int64_t dim = cfg.dim, ff = cfg.ff_dim, vocab = cfg.vocab_size;
  const int64_t q_dim = static_cast<int64_t>(cfg.n_heads) * cfg.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(cfg.n_kv_heads) * cfg.head_dim;

  w.tok_embd = ld.matrix("token_embd.weight", vocab, dim);
  w.output_norm = ld.vector("output_norm.weight", dim);
  w.output = ld.find("output.weight") ? ld.matrix("output.weight", vocab, dim) : w.tok_embd;
  // Validated (F32, finite, positive) by ModelConfig::from_gguf, which also read the values.
  if (!cfg.rope_freq_factors.empty())
    w.rope_freqs = ld.vector("rope_freqs.weight", static_cast<int64_t>(cfg.rope_freq_factors.size()));

  if (!cfg.rope_factors_long.empty()) {
    w.rope_long = ld.vector("rope_factors_long.weight", static_cast<int64_t>(cfg.rope_factors_long.size()));
    w.rope_short = ld.vector("rope_factors_short.weight", static_cast<int64_t>(cfg.rope_factors_short.size()));
  }

  for (int l = 0; l < cfg.n_layers; ++l) {
    if (on_layer) on_layer(l, cfg.n_layers);
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers.emplace_back();
    L.attn_norm = ld.vector(p + "attn_norm.weight", dim);
    if (cfg.fused_qkv) {
      const std::string qkv = p + "attn_qkv.weight";
      const int64_t rows = q_dim + 2 * kv_dim;
      L.wq = ld.matrix_part(qkv, rows, dim, 0, q_dim);
      L.wk = ld.matrix_part(qkv, rows, dim, q_dim, kv_dim);
      L.wv = ld.matrix_part(qkv, rows, dim, q_dim + kv_dim, kv_dim);
    } else {
      L.wq = ld.matrix(p + "attn_q.weight", q_dim, dim);
      L.wk = ld.matrix(p + "attn_k.weight", kv_dim, dim);
      L.wv = ld.matrix(p + "attn_v.weight", kv_dim, dim);
    }
    if (cfg.qk_norm) {
      L.q_norm = ld.vector(p + "attn_q_norm.weight", cfg.head_dim);
      L.k_norm = ld.vector(p + "attn_k_norm.weight", cfg.head_dim);
    }
    if (cfg.post_norms) {
      L.post_attn_norm = ld.vector(p + "post_attention_norm.weight", dim);
      L.post_ffn_norm = ld.vector(p + "post_ffw_norm.weight", dim);
    }
    L.wo = ld.matrix(p + "attn_output.weight", dim, q_dim);
    if (cfg.qkv_bias) {
      L.bq = ld.vector(p + "attn_q.bias", q_dim);
      L.bk = ld.vector(p + "attn_k.bias", kv_dim);
      L.bv = ld.vector(p + "attn_v.bias", kv_dim);
    }
    L.ffn_norm = ld.vector(p + "ffn_norm.weight", dim);
    if (cfg.n_experts > 0) {
      L.moe = load_moe_layer(file, cfg, backend, l, w.host_f32);
      continue;
    }
    if (cfg.fused_gate_up) {  // gate rows first, then up (llama.cpp's SwiGLU split)
      L.w_gate = ld.matrix_part(p + "ffn_up.weight", 2 * ff, dim, 0, ff);
      L.w_up = ld.matrix_part(p + "ffn_up.weight", 2 * ff, dim, ff, ff);
    } else {
      L.w_gate = ld.matrix(p + "ffn_gate.weight", ff, dim);
      L.w_up = ld.matrix(p + "ffn_up.weight", ff, dim);
    }
    L.w_down = ld.matrix(p + "ffn_down.weight", dim, ff);
  }
  if (on_layer) on_layer(cfg.n_layers, cfg.n_layers);
  return w;
}

}  // namespace pagoda
