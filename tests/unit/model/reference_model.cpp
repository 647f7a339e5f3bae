#include "tests/unit/model/reference_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "kernels/cpu/quants.h"

namespace pagoda::test {
namespace {

using gguf::Value;

std::vector<float> uniform(size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> encode(GgmlType type, const std::vector<float>& v, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(v.size()) / cols;
  const size_t rb = ggml_row_size(type, cols);
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) cpu::quantize_row(type, v.data() + r * cols, out.data() + r * rb, cols);
  return out;
}

// x (n x in) times W^T (W: out x in, row-major) -> n x out.
std::vector<double> mul(const std::vector<double>& x, const std::vector<double>& w, int64_t in) {
  const int64_t n = static_cast<int64_t>(x.size()) / in, out = static_cast<int64_t>(w.size()) / in;
  std::vector<double> y(static_cast<size_t>(n * out), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t c = 0; c < in; ++c) s += x[i * in + c] * w[o * in + c];
      y[i * out + o] = s;
    }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  const size_t d = w.size();
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (size_t c = 0; c < d; ++c) ss += x[r * d + c] * x[r * d + c];
    const double s = 1.0 / std::sqrt(ss / d + eps);
    for (size_t c = 0; c < d; ++c) y[r * d + c] = x[r * d + c] * s * w[c];
  }
  return y;
}

}  // namespace

std::vector<uint8_t> make_tiny_model(const TinyModelSpec& s) {
  std::mt19937_64 rng(s.seed);
  gguf::GgufWriter w;
  const std::string a = s.arch;
  const int head_dim = s.dim / s.heads;
  w.set("general.architecture", Value::from_string(a));
  w.set("general.name", Value::from_string("tiny-" + a));
  w.set(a + ".block_count", Value::from_u32(static_cast<uint32_t>(s.layers)));
  w.set(a + ".context_length", Value::from_u32(4096));
  w.set(a + ".embedding_length", Value::from_u32(static_cast<uint32_t>(s.dim)));
  w.set(a + ".feed_forward_length", Value::from_u32(static_cast<uint32_t>(s.ff)));
  w.set(a + ".attention.head_count", Value::from_u32(static_cast<uint32_t>(s.heads)));
  w.set(a + ".attention.head_count_kv", Value::from_u32(static_cast<uint32_t>(s.kv_heads)));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::from_f32(1e-6f));
  add_tiny_moe_keys(w, s);
  w.set(a + ".rope.freq_base", Value::from_f32(s.rope_base));
  w.set(a + ".rope.dimension_count", Value::from_u32(static_cast<uint32_t>(s.n_rot ? s.n_rot : head_dim)));
  if (s.rope_scale_linear > 0) w.set(a + ".rope.scale_linear", Value::from_f32(s.rope_scale_linear));
  const bool gemma = a == "gemma2" || a == "gemma3";
  if (gemma) w.set(a + ".attention.key_length", Value::from_u32(static_cast<uint32_t>(head_dim)));
  if (a == "gemma2") {
    w.set(a + ".attn_logit_softcapping", Value::from_f32(s.attn_softcap));
    w.set(a + ".final_logit_softcapping", Value::from_f32(s.final_softcap));
  }
  if (a == "gemma3") w.set(a + ".rope.freq_base_swa", Value::from_f32(s.local_rope_base));
  if (gemma || a == "phi3") w.set(a + ".attention.sliding_window", Value::from_u32(static_cast<uint32_t>(s.window)));
  if (s.longrope) {
    w.set(a + ".rope.scaling.original_context_length", Value::from_u32(1024));
    w.set(a + ".rope.scaling.attn_factor", Value::from_f32(1.1f));
    const int pairs = (s.n_rot ? s.n_rot : head_dim) / 2;
    w.add_tensor("rope_factors_long.weight", {pairs}, GgmlType::F32, encode(GgmlType::F32, uniform(size_t(pairs), rng, 1, 12), pairs));
    w.add_tensor("rope_factors_short.weight", {pairs}, GgmlType::F32, encode(GgmlType::F32, uniform(size_t(pairs), rng, 0.7f, 1.6f), pairs));
  }
  if (!s.rope_freqs.empty())
    w.add_tensor("rope_freqs.weight", {int64_t(s.rope_freqs.size())}, GgmlType::F32,
                 encode(GgmlType::F32, s.rope_freqs, int64_t(s.rope_freqs.size())));

  // experts > 0: that many [rows x cols] matrices stacked as one 3-D tensor.
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, int64_t experts = 0) {
    const float r = 1.0f / std::sqrt(static_cast<float>(cols)) * 1.7f;  // keeps activations O(1)
    const int64_t all = rows * std::max<int64_t>(experts, 1);
    w.add_tensor(name, experts > 0 ? std::vector<int64_t>{cols, rows, experts} : std::vector<int64_t>{cols, rows},
                 s.type, encode(s.type, uniform(size_t(all * cols), rng, -r, r), cols));
  };
  const auto vec = [&](const std::string& name, int64_t n, float lo, float hi) {
    w.add_tensor(name, {n}, GgmlType::F32, encode(GgmlType::F32, uniform(size_t(n), rng, lo, hi), n));
  };
  w.add_tensor("token_embd.weight", {s.dim, s.vocab}, s.type,
               encode(s.type, uniform(size_t(s.vocab) * s.dim, rng, -1, 1), s.dim));
  vec("output_norm.weight", s.dim, 0.5f, 1.5f);
  if (!s.tied && !gemma) matrix("output.weight", s.vocab, s.dim);
  const int q_dim = s.heads * head_dim, kv_dim = s.kv_heads * head_dim;
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", s.dim, 0.5f, 1.5f);
    if (a == "phi3") {
      matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, s.dim);
    } else {
      matrix(p + "attn_q.weight", q_dim, s.dim);
      matrix(p + "attn_k.weight", kv_dim, s.dim);
      matrix(p + "attn_v.weight", kv_dim, s.dim);
    }
    if (a == "qwen3" || a == "qwen3moe" || a == "gemma3") {
      vec(p + "attn_q_norm.weight", head_dim, 0.5f, 1.5f);
      vec(p + "attn_k_norm.weight", head_dim, 0.5f, 1.5f);
    }
    if (gemma) {
      vec(p + "post_attention_norm.weight", s.dim, 0.5f, 1.5f);
      vec(p + "post_ffw_norm.weight", s.dim, 0.5f, 1.5f);
    }
    if (a == "qwen2" || a == "qwen2moe") {
      vec(p + "attn_q.bias", q_dim, -0.5f, 0.5f);
      vec(p + "attn_k.bias", kv_dim, -0.5f, 0.5f);
      vec(p + "attn_v.bias", kv_dim, -0.5f, 0.5f);
    }
    matrix(p + "attn_output.weight", s.dim, q_dim);
    vec(p + "ffn_norm.weight", s.dim, 0.5f, 1.5f);
    if (s.experts > 0 || arch_has_experts(a)) {
      add_tiny_moe_layer(w, s, p, matrix, vec);
      continue;
    }
    if (a == "phi3") {
      matrix(p + "ffn_up.weight", 2 * s.ff, s.dim);
    } else {
      matrix(p + "ffn_gate.weight", s.ff, s.dim);
      matrix(p + "ffn_up.weight", s.ff, s.dim);
    }
    matrix(p + "ffn_down.weight", s.dim, s.ff);
  }
  return w.to_bytes();
}

std::vector<double> ReferenceModel::matrix(const gguf::GgufFile& f, const std::string& name) const {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("reference model: missing " + name);
  const int64_t cols = t->dims[0], rows = t->n_elements() / cols;
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<double> out;
  const size_t rb = ggml_row_size(t->type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::dequantize_row(t->type, f.tensor_data(*t) + r * rb, row.data(), cols);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

ReferenceModel::ReferenceModel(const gguf::GgufFile& f, int n_ctx) {
  const std::string a = *f.get_string("general.architecture");
  arch_ = a;
  gemma_ = a == "gemma2" || a == "gemma3";
  neox_ = a != "llama";
  bias_ = a == "qwen2" || a == "qwen2moe";
  layers_ = static_cast<int>(*f.get_int(a + ".block_count"));
  dim_ = static_cast<int>(*f.get_int(a + ".embedding_length"));
  ff_ = static_cast<int>(*f.get_int(a + ".feed_forward_length"));
  heads_ = static_cast<int>(*f.get_int(a + ".attention.head_count"));
  kv_heads_ = static_cast<int>(*f.get_int(a + ".attention.head_count_kv"));
  head_dim_ = static_cast<int>(f.get_int(a + ".attention.key_length").value_or(dim_ / heads_));
  n_rot_ = static_cast<int>(f.get_int(a + ".rope.dimension_count").value_or(head_dim_));
  eps_ = *f.get_float(a + ".attention.layer_norm_rms_epsilon");
  base_ = f.get_float(a + ".rope.freq_base").value_or(10000.0);
  scale_ = 1.0 / f.get_float(a + ".rope.scale_linear").value_or(1.0);
  moe_ = MoeShape::read(f, a, ff_);
  if (f.find_tensor("rope_freqs.weight")) rope_freqs_ = matrix(f, "rope_freqs.weight");
  // Gemma: embeddings times sqrt(dim); gemma2 soft-caps attention scores and logits.
  embed_scale_ = gemma_ ? std::sqrt(double(dim_)) : 1.0;
  attn_scale_ = 1.0 / std::sqrt(double(head_dim_));
  if (a == "gemma2") {
    attn_cap_ = f.get_float(a + ".attn_logit_softcapping").value_or(50.0);
    final_cap_ = f.get_float(a + ".final_logit_softcapping").value_or(30.0);
  }
  // phi3 LongRoPE: long divisors past the original context, and both Q and K scaled by the
  // attention factor (so the scores by its square).
  if (f.find_tensor("rope_factors_long.weight")) {
    const int64_t ctx = n_ctx > 0 ? n_ctx : *f.get_int(a + ".context_length");
    const int64_t orig = *f.get_int(a + ".rope.scaling.original_context_length");
    rope_freqs_ = matrix(f, ctx > orig ? "rope_factors_long.weight" : "rope_factors_short.weight");
    const double mscale = f.get_float(a + ".rope.scaling.attn_factor").value_or(1.0);
    attn_scale_ *= mscale * mscale;
  }
  const int window = static_cast<int>(f.get_int(a + ".attention.sliding_window").value_or(0));
  embd_ = matrix(f, "token_embd.weight");
  vocab_ = static_cast<int>(embd_.size() / dim_);
  out_norm_ = matrix(f, "output_norm.weight");
  output_ = f.find_tensor("output.weight") ? matrix(f, "output.weight") : embd_;
  const auto opt = [&](const std::string& name) {
    return f.find_tensor(name) ? matrix(f, name) : std::vector<double>{};
  };
  for (int l = 0; l < layers_; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer L;
    L.attn_norm = matrix(f, p + "attn_norm.weight");
    if (a == "phi3") {  // rows: Q, then K, then V
      const auto qkv = matrix(f, p + "attn_qkv.weight");
      const size_t q = size_t(heads_) * head_dim_ * dim_, kv = size_t(kv_heads_) * head_dim_ * dim_;
      L.wq.assign(qkv.begin(), qkv.begin() + q);
      L.wk.assign(qkv.begin() + q, qkv.begin() + q + kv);
      L.wv.assign(qkv.begin() + q + kv, qkv.end());
    } else {
      L.wq = matrix(f, p + "attn_q.weight");
      L.wk = matrix(f, p + "attn_k.weight");
      L.wv = matrix(f, p + "attn_v.weight");
    }
    if (bias_) {
      L.bq = matrix(f, p + "attn_q.bias");
      L.bk = matrix(f, p + "attn_k.bias");
      L.bv = matrix(f, p + "attn_v.bias");
    }
    L.q_norm = opt(p + "attn_q_norm.weight");
    L.k_norm = opt(p + "attn_k_norm.weight");
    L.post_attn = opt(p + "post_attention_norm.weight");
    L.post_ffn = opt(p + "post_ffw_norm.weight");
    L.wo = matrix(f, p + "attn_output.weight");
    L.ffn_norm = matrix(f, p + "ffn_norm.weight");
    // Local layers: gemma2 the even ones, gemma3 all but every sixth, phi3 all of them.
    const bool local = (a == "gemma2" && l % 2 == 0) || (a == "gemma3" && l % 6 != 5) || a == "phi3";
    L.window = local ? window : 0;
    L.base = base_;
    L.scale = scale_;
    if (a == "gemma3" && local) {
      L.base = f.get_float(a + ".rope.freq_base_swa").value_or(10000.0);
      L.scale = 1.0;
    }
    if (moe_.experts > 0) {
      L.moe = ReferenceMoe::read(moe_, [&](const std::string& name) { return matrix(f, p + name); });
      l_.push_back(std::move(L));
      continue;
    }
    if (a == "phi3") {  // rows: gate, then up
      const auto gu = matrix(f, p + "ffn_up.weight");
      L.gate.assign(gu.begin(), gu.begin() + gu.size() / 2);
      L.up.assign(gu.begin() + gu.size() / 2, gu.end());
    } else {
      L.gate = matrix(f, p + "ffn_gate.weight");
      L.up = matrix(f, p + "ffn_up.weight");
    }
    L.down = matrix(f, p + "ffn_down.weight");
    l_.push_back(std::move(L));
  }
}

std::vector<double> ReferenceModel::forward(const std::vector<int32_t>& tokens) const {
  const int n = static_cast<int>(tokens.size()), hd = head_dim_;
  std::vector<double> x;
  for (int32_t t : tokens)
    for (int c = 0; c < dim_; ++c) x.push_back(embd_[size_t(t) * dim_ + c] * embed_scale_);
  // Rotates every head of every row at position = row index.
  const auto rope = [&](std::vector<double>& v, int n_heads, double base, double scale) {
    for (int p = 0; p < n; ++p)
      for (int h = 0; h < n_heads; ++h) {
        double* xh = v.data() + (int64_t(p) * n_heads + h) * hd;
        for (int i = 0; i < n_rot_ / 2; ++i) {
          // Llama 3.1 rope_freqs (and phi3's LongRoPE factors) divide pair i's frequency.
          const double ff = rope_freqs_.empty() ? 1.0 : rope_freqs_[size_t(i)];
          const double th = p * scale * std::pow(base, -2.0 * i / n_rot_) / ff;
          const int ia = neox_ ? i : 2 * i, ib = neox_ ? i + n_rot_ / 2 : 2 * i + 1;
          const double x0 = xh[ia], x1 = xh[ib];
          xh[ia] = x0 * std::cos(th) - x1 * std::sin(th);
          xh[ib] = x0 * std::sin(th) + x1 * std::cos(th);
        }
      }
  };
  const auto add_bias = [](std::vector<double>& v, const std::vector<double>& b) {
    for (size_t i = 0; i < v.size(); ++i) v[i] += b[i % b.size()];
  };
  const auto cap = [](double v, double c) { return c > 0 ? c * std::tanh(v / c) : v; };
  for (const Layer& L : l_) {
    const auto xn = rmsnorm(x, L.attn_norm, eps_);
    auto q = mul(xn, L.wq, dim_), k = mul(xn, L.wk, dim_), v = mul(xn, L.wv, dim_);
    if (bias_) {
      add_bias(q, L.bq);
      add_bias(k, L.bk);
      add_bias(v, L.bv);
    }
    if (!L.q_norm.empty()) {  // rmsnorm works row by row of the weight's width: one head each
      q = rmsnorm(q, L.q_norm, eps_);
      k = rmsnorm(k, L.k_norm, eps_);
    }
    rope(q, heads_, L.base, L.scale);
    rope(k, kv_heads_, L.base, L.scale);
    std::vector<double> att(size_t(n) * heads_ * hd, 0.0);
    for (int p = 0; p < n; ++p)
      for (int h = 0; h < heads_; ++h) {
        const int kvh = h * kv_heads_ / heads_;
        const int first = L.window > 0 ? std::max(0, p - L.window + 1) : 0;  // the last `window` positions
        std::vector<double> s(size_t(p) + 1, 0.0);
        double mx = -1e300, sum = 0;
        for (int j = first; j <= p; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += q[(size_t(p) * heads_ + h) * hd + c] * k[(size_t(j) * kv_heads_ + kvh) * hd + c];
          s[size_t(j)] = cap(d * attn_scale_, attn_cap_);
          mx = std::max(mx, s[size_t(j)]);
        }
        for (int j = first; j <= p; ++j) sum += s[size_t(j)] = std::exp(s[size_t(j)] - mx);
        for (int j = first; j <= p; ++j)
          for (int c = 0; c < hd; ++c)
            att[(size_t(p) * heads_ + h) * hd + c] += s[size_t(j)] / sum * v[(size_t(j) * kv_heads_ + kvh) * hd + c];
      }
    auto o = mul(att, L.wo, int64_t(heads_) * hd);
    if (!L.post_attn.empty()) o = rmsnorm(o, L.post_attn, eps_);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const auto xn2 = rmsnorm(x, L.ffn_norm, eps_);
    if (moe_.experts > 0) {
      const auto d = L.moe.forward(moe_, xn2, dim_);
      for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
      continue;
    }
    auto g = mul(xn2, L.gate, dim_);
    const auto u = mul(xn2, L.up, dim_);
    for (size_t i = 0; i < g.size(); ++i) {
      const double a = g[i];
      // Gemma: GELU, tanh approximation; the others: SiLU.
      g[i] = (gemma_ ? 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)))
                     : a / (1.0 + std::exp(-a))) * u[i];
    }
    auto d = mul(g, L.down, ff_);
    if (!L.post_ffn.empty()) d = rmsnorm(d, L.post_ffn, eps_);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  auto logits = mul(rmsnorm(x, out_norm_, eps_), output_, dim_);
  for (double& l : logits) l = cap(l, final_cap_);
  return logits;
}

}  // namespace pagoda::test
