// layer_norm_rows, and encoder_attention with one task per (input, head) pair; see encoder_ops.h.
#include "kernels/cpu/encoder_ops.h"

#include <cmath>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_window_softcap.h"
#include "kernels/cpu/thread_pool.h"

namespace pagoda::cpu {

void layer_norm_rows(const float* x, int64_t n, int64_t d, const float* g, const float* b, float eps, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * d;
    float* dst = out + i * d;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += row[j];
    mean /= double(d);
    for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= double(d);
    const float inv = float(1.0 / std::sqrt(var + eps));
    for (int64_t j = 0; j < d; ++j) dst[j] = float(row[j] - mean) * inv * g[j] + b[j];
  }
}

void encoder_attention(ThreadPool& pool, const std::vector<int64_t>& starts, int n_heads, int head_dim,
                       const float* q, const float* k, const float* v, float* out) {
  const int64_t n_inputs = int64_t(starts.size()) - 1, d = int64_t(n_heads) * head_dim, hd = head_dim;
  if (n_inputs <= 0) return;
  const float scale = 1.0f / std::sqrt(float(hd));
  pool.parallel_for_dynamic(n_inputs * n_heads, 1, [&](int64_t b, int64_t e, int) {
    ThreadPool inline_pool(1);  // matmul inside a task of `pool`: runs on this thread
    std::vector<float> qh, kh, vt, s, oh;
    for (int64_t task = b; task < e; ++task) {
      const int64_t input = task / n_heads, h = task % n_heads;
      const int64_t r0 = starts[size_t(input)], n = starts[size_t(input) + 1] - r0;
      qh.resize(size_t(n * hd)), kh.resize(size_t(n * hd)), vt.resize(size_t(hd * n));
      s.resize(size_t(n * n)), oh.resize(size_t(n * hd));
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = (r0 + j) * d + h * hd;
        for (int64_t u = 0; u < hd; ++u) {
          qh[size_t(j * hd + u)] = q[at + u];
          kh[size_t(j * hd + u)] = k[at + u];
          vt[size_t(u * n + j)] = v[at + u];
        }
      }
      matmul(inline_pool, GgmlType::F32, kh.data(), n, hd, qh.data(), n, s.data());
      scale_row(s.data(), scale, n * n);
      for (int64_t i = 0; i < n; ++i) softmax_row(s.data() + i * n, n);
      matmul(inline_pool, GgmlType::F32, vt.data(), hd, n, s.data(), n, oh.data());
      for (int64_t i = 0; i < n; ++i)
        std::copy(oh.begin() + i * hd, oh.begin() + (i + 1) * hd, out + (r0 + i) * d + h * hd);
    }
  });
}

}  // namespace pagoda::cpu
