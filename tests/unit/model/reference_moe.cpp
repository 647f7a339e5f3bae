// The reference MoE FFN and the tiny models' MoE tensors (see reference_moe.h).
#include "tests/unit/model/reference_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tests/unit/model/reference_model.h"

namespace pagoda::test {
namespace {

// y = W x for one row (W: [out x in] row-major, starting at w).
std::vector<double> matvec(const double* w, const double* x, int64_t out, int64_t in) {
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t c = 0; c < in; ++c) y[size_t(o)] += w[o * in + c] * x[c];
  return y;
}

// down (silu(gate x) * up x) for one row.
std::vector<double> swiglu(const double* gate, const double* up, const double* down, const double* x,
                           int64_t dim, int64_t ff) {
  auto g = matvec(gate, x, ff, dim);
  const auto u = matvec(up, x, ff, dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(down, g.data(), dim, ff);
}

}  // namespace

bool arch_has_experts(const std::string& arch) { return arch == "qwen2moe" || arch == "qwen3moe"; }

MoeShape MoeShape::read(const gguf::GgufFile& f, const std::string& a, int dense_ff) {
  MoeShape m;
  m.experts = static_cast<int>(f.get_int(a + ".expert_count").value_or(0));
  if (m.experts == 0) return m;
  m.used = static_cast<int>(*f.get_int(a + ".expert_used_count"));
  const bool qwen2moe = a == "qwen2moe";
  const int ff_default = qwen2moe || a == "qwen3moe" ? dense_ff / m.used : dense_ff;
  m.ff = static_cast<int>(f.get_int(a + ".expert_feed_forward_length").value_or(ff_default));
  m.shared_ff = qwen2moe ? static_cast<int>(f.get_int(a + ".expert_shared_feed_forward_length").value_or(dense_ff)) : 0;
  m.normalize = !qwen2moe;
  return m;
}

ReferenceMoe ReferenceMoe::read(const MoeShape& shape, const std::function<std::vector<double>(const std::string&)>& t) {
  ReferenceMoe r;
  r.router = t("ffn_gate_inp.weight");
  r.gate = t("ffn_gate_exps.weight");
  r.up = t("ffn_up_exps.weight");
  r.down = t("ffn_down_exps.weight");
  if (shape.shared_ff > 0) {
    r.shared_gate_inp = t("ffn_gate_inp_shexp.weight");
    r.shared_gate = t("ffn_gate_shexp.weight");
    r.shared_up = t("ffn_up_shexp.weight");
    r.shared_down = t("ffn_down_shexp.weight");
  }
  return r;
}

std::vector<double> ReferenceMoe::forward(const MoeShape& s, const std::vector<double>& x, int dim) const {
  const int64_t n = static_cast<int64_t>(x.size()) / dim, ff = s.ff;
  std::vector<double> out(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* xi = x.data() + i * dim;
    auto p = matvec(router.data(), xi, s.experts, dim);
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += v = std::exp(v - mx);
    for (double& v : p) v /= sum;
    std::vector<int> order(static_cast<size_t>(s.experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
    double chosen = 0;
    for (int j = 0; j < s.used; ++j) chosen += p[size_t(order[size_t(j)])];
    double* o = out.data() + i * dim;
    for (int j = 0; j < s.used; ++j) {
      const int e = order[size_t(j)];
      const double wgt = s.normalize ? p[size_t(e)] / chosen : p[size_t(e)];
      const auto y = swiglu(gate.data() + int64_t(e) * ff * dim, up.data() + int64_t(e) * ff * dim,
                            down.data() + int64_t(e) * dim * ff, xi, dim, ff);
      for (int c = 0; c < dim; ++c) o[c] += wgt * y[size_t(c)];
    }
    if (s.shared_ff > 0) {
      double g = 0;
      for (int c = 0; c < dim; ++c) g += shared_gate_inp[size_t(c)] * xi[c];
      const double wgt = 1.0 / (1.0 + std::exp(-g));
      const auto y = swiglu(shared_gate.data(), shared_up.data(), shared_down.data(), xi, dim, s.shared_ff);
      for (int c = 0; c < dim; ++c) o[c] += wgt * y[size_t(c)];
    }
  }
  return out;
}

void add_tiny_moe_keys(gguf::GgufWriter& w, const TinyModelSpec& s) {
  const bool qwen2moe = s.arch == "qwen2moe";
  if (s.experts == 0 && !arch_has_experts(s.arch)) return;
  const std::string& a = s.arch;
  w.set(a + ".expert_count", gguf::Value::from_u32(static_cast<uint32_t>(s.experts)));
  w.set(a + ".expert_used_count", gguf::Value::from_u32(static_cast<uint32_t>(s.experts_used)));
  const int eff = s.expert_ff > 0 ? s.expert_ff : s.ff;
  if (s.expert_ff > 0 || arch_has_experts(a)) w.set(a + ".expert_feed_forward_length", gguf::Value::from_u32(static_cast<uint32_t>(eff)));
  if (qwen2moe && s.shared_ff > 0)
    w.set(a + ".expert_shared_feed_forward_length", gguf::Value::from_u32(static_cast<uint32_t>(s.shared_ff)));
}

void add_tiny_moe_layer(gguf::GgufWriter& w, const TinyModelSpec& s, const std::string& p,
                        const std::function<void(const std::string&, int64_t, int64_t, int64_t)>& matrix,
                        const std::function<void(const std::string&, int64_t, float, float)>& vec) {
  const int64_t eff = s.expert_ff > 0 ? s.expert_ff : s.ff, sff = s.shared_ff > 0 ? s.shared_ff : s.ff;
  matrix(p + "ffn_gate_inp.weight", s.experts, s.dim, 0);
  matrix(p + "ffn_gate_exps.weight", eff, s.dim, s.experts);
  matrix(p + "ffn_up_exps.weight", eff, s.dim, s.experts);
  matrix(p + "ffn_down_exps.weight", s.dim, eff, s.experts);
  if (s.arch != "qwen2moe") return;
  vec(p + "ffn_gate_inp_shexp.weight", s.dim, -0.3f, 0.3f);
  matrix(p + "ffn_gate_shexp.weight", sff, s.dim, 0);
  matrix(p + "ffn_up_shexp.weight", sff, s.dim, 0);
  matrix(p + "ffn_down_shexp.weight", s.dim, sff, 0);
}

}  // namespace pagoda::test
