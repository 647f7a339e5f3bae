// Scalar implementations of kernels/cpu/ops_window_softcap.h, and the dispatch of gelu_mul_row,
// softcap_row and attention_group_ext to the AVX2 kernels (kernels/cpu/ops_avx2.cpp, also used
// on AVX-512 hosts).
#include "kernels/cpu/ops_window_softcap.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops_impl.h"

namespace pagoda::cpu {
void gelu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  if (detail::ops_have_avx2()) return detail::gelu_mul_row_avx2(gate, up, out, n);
  detail::gelu_mul_row_portable(gate, up, out, n);
}

void softcap_row(float* x, float cap, int64_t n) {
  if (detail::ops_have_avx2()) return detail::softcap_row_avx2(x, cap, n);
  detail::softcap_row_portable(x, cap, n);
}

void detail::gelu_mul_row_portable(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void scale_row(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void detail::softcap_row_portable(float* x, float cap, int64_t n) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void detail::attention_group_ext_portable(const AttnRows& r, int g, int head_dim, float scale, int window,
                                          float softcap, const KvPool& k, const KvPool& v, int kv_head,
                                          const int32_t* block_table, float* scratch) {
  const int last_ctx = r.n_ctx + r.n_q - 1;
  // Row i's keys are [first(i), ctx(i)); the group reads [first(0), last_ctx) once.
  const auto first_of = [&](int ctx) { return window > 0 ? std::max(0, ctx - window) : 0; };
  const int lo = first_of(r.n_ctx);
  const int span = last_ctx - lo;  // keys any row sees
  float* scores = scratch;         // [n_q][g][span], index i - lo
  float* krow = scratch + static_cast<int64_t>(r.n_q) * g * span;
  float* vrow = krow + k.row_elems();
  const int bs = k.block_size;
  const auto slot_of = [&](int i) { return attention_slot(r, block_table, bs, i); };  // tree rows: their path
  const int64_t head_off = static_cast<int64_t>(kv_head) * head_dim;
  const float inv_cap = softcap > 0 ? 1.0f / softcap : 0.0f;
  for (int i = lo; i < last_ctx; ++i) {
    kv_load_rows(k, slot_of(i), 1, krow);
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi;
      if (i < first_of(ctx) || i >= ctx) continue;
      for (int j = 0; j < g; ++j) {
        float s = detail::dot_portable(r.q + qi * r.q_stride + static_cast<int64_t>(j) * head_dim, krow + head_off, head_dim) * scale;
        if (softcap > 0) s = softcap * std::tanh(s * inv_cap);
        scores[(static_cast<int64_t>(qi) * g + j) * span + (i - lo)] = s;
      }
    }
  }
  for (int qi = 0; qi < r.n_q; ++qi) {
    const int ctx = r.n_ctx + qi, first = first_of(ctx);
    for (int j = 0; j < g; ++j)
      detail::softmax_row_portable(scores + (static_cast<int64_t>(qi) * g + j) * span + (first - lo), ctx - first);
    std::memset(r.out + qi * r.out_stride, 0, sizeof(float) * static_cast<size_t>(g) * head_dim);
  }
  for (int i = lo; i < last_ctx; ++i) {
    kv_load_rows(v, slot_of(i), 1, vrow);
    const float* vh = vrow + head_off;
    for (int qi = 0; qi < r.n_q; ++qi) {
      const int ctx = r.n_ctx + qi;
      if (i < first_of(ctx) || i >= ctx) continue;
      for (int j = 0; j < g; ++j) {
        const float w = scores[(static_cast<int64_t>(qi) * g + j) * span + (i - lo)];
        float* o = r.out + qi * r.out_stride + static_cast<int64_t>(j) * head_dim;
        for (int d = 0; d < head_dim; ++d) o[d] += w * vh[d];
      }
    }
  }
}

void attention_group_ext(const AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                         const KvPool& k, const KvPool& v, int kv_head, const int32_t* block_table,
                         float* scratch) {
  if (detail::ops_have_avx2() && head_dim <= 256)
    return detail::attention_group_avx2(r, g, head_dim, scale, window, softcap, k, v, kv_head, block_table, scratch);
  detail::attention_group_ext_portable(r, g, head_dim, scale, window, softcap, k, v, kv_head, block_table, scratch);
}

}  // namespace pagoda::cpu
