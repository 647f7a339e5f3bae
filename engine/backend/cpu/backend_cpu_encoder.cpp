// CpuBackend's encoder ops: host rows in (write), LayerNorm and bidirectional attention within
// each input through kernels/cpu/encoder_ops.h.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/encoder_ops.h"

namespace pagoda {
namespace {

float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("CpuBackend: ") + what);
}

void check_rows(const Tensor& t, int64_t n, const char* what) {
  check(n >= 0 && n <= t.rows && t.data && t.type == GgmlType::F32, what);
}

}  // namespace

void CpuBackend::write(Tensor& x, const float* host, int64_t n) {
  check_rows(x, n, "write: n exceeds the rows");
  std::copy(host, host + n * x.cols, f32(x));
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                            int64_t n) {
  check(weight.cols == x.cols && bias.cols == x.cols && out.cols == x.cols, "layer_norm: widths differ");
  check_rows(x, n, "layer_norm: n exceeds the rows of x");
  check_rows(out, n, "layer_norm: n exceeds the rows of out");
  each_row(n, x.cols * 4, [&](int64_t i, int) {
    cpu::layer_norm_rows(f32(x) + i * x.cols, 1, x.cols, f32(weight), f32(bias), eps, f32(out) + i * x.cols);
  });
}

void CpuBackend::encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                   const std::vector<int64_t>& starts, int n_heads, int head_dim) {
  const int64_t d = int64_t(n_heads) * head_dim;
  check(!starts.empty() && starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()),
        "encoder_attention: starts must rise from 0");
  check(q.cols == d && k.cols == d && v.cols == d && out.cols == d, "encoder_attention: widths differ");
  const int64_t n = starts.back();
  for (const Tensor* t : {&q, &k, &v, static_cast<const Tensor*>(&out)}) check_rows(*t, n, "encoder_attention: rows exceed a tensor");
  cpu::encoder_attention(*pool_, starts, n_heads, head_dim, f32(q), f32(k), f32(v), f32(out));
}

}  // namespace pagoda
