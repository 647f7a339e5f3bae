// Portable implementations of kernels/cpu/ops.h, and the dispatch to the AVX2 / AVX-512 variants.
// Reductions use 8 independent lane accumulators combined in a fixed order, which the compiler
// can vectorize without changing the result and which never depends on the batch.
#include "kernels/cpu/ops.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/cpu/quants.h"

namespace pagoda::cpu {

// Lives here, not in ops_avx512.cpp, so no AVX-512 instruction runs before the check.
bool detail::ops_have_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

bool detail::ops_have_avx2() { return cpu_supports(CpuIsa::Avx2); }

namespace {

bool use_avx512() {
  static const bool yes = detail::ops_have_avx512();
  return yes;
}

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

float detail::dot_portable(const float* a, const float* b, int64_t n) { return dot(a, b, n); }

void detail::rms_norm_row_portable(const float* x, const float* w, float eps, float* y, int64_t n) {
  const float ss = dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void detail::silu_mul_row_portable(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void detail::softmax_row_portable(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

namespace {

// Byte offset of (slot, kv_head) in a pool.
inline int64_t kv_offset(const KvPool& p, int64_t slot, int kv_head) {
  return slot * p.row_bytes() + static_cast<int64_t>(kv_head) * p.head_bytes();
}

// n values of a pool from byte offset `off` (a head row's start) as floats; for Q8_0, n is a
// whole number of groups.
void kv_load(const KvPool& p, int64_t off, int64_t n, float* out) {
  const uint8_t* src = static_cast<const uint8_t*>(p.data) + off;
  if (p.type == GgmlType::F32) {
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
  } else if (p.type == GgmlType::Q8_0) {
    kv_q8_dequantize(src, n, kv_q8_group(p.head_dim), out);
  } else {
    const auto* h = reinterpret_cast<const uint16_t*>(src);
    if (use_avx512()) return detail::f16_to_f32_avx512(h, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
  }
}

void kv_save(const KvPool& p, int64_t off, int64_t n, const float* in) {
  uint8_t* dst = static_cast<uint8_t*>(p.data) + off;
  if (p.type == GgmlType::F32) {
    std::memcpy(dst, in, static_cast<size_t>(n) * 4);
  } else if (p.type == GgmlType::Q8_0) {
    kv_q8_quantize(in, n, kv_q8_group(p.head_dim), dst);
  } else {
    auto* h = reinterpret_cast<uint16_t*>(dst);
    if (use_avx512()) return detail::f32_to_f16_avx512(in, h, n);
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(in[i]);
  }
}

// One token's attention (the scalar oracle the AVX-512 version is tested against).
void attention_one(const AttnRows& r, const float* q, int g, int head_dim, float scale, const KvPool& k,
                   const KvPool& v, int kv_head, const int32_t* block_table, int n_ctx, float* scratch, float* out) {
  float* scores = scratch;  // [g][n_ctx]
  float* row = scratch + static_cast<int64_t>(g) * n_ctx;
  const int bs = k.block_size;
  for (int i = 0; i < n_ctx; ++i) {
    const int64_t slot = attention_slot(r, block_table, bs, i);
    kv_load(k, kv_offset(k, slot, kv_head), head_dim, row);
    for (int j = 0; j < g; ++j)
      scores[static_cast<int64_t>(j) * n_ctx + i] = dot(q + j * head_dim, row, head_dim) * scale;
  }
  for (int j = 0; j < g; ++j) detail::softmax_row_portable(scores + static_cast<int64_t>(j) * n_ctx, n_ctx);
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(g) * head_dim);
  for (int i = 0; i < n_ctx; ++i) {
    const int64_t slot = attention_slot(r, block_table, bs, i);
    kv_load(v, kv_offset(v, slot, kv_head), head_dim, row);
    for (int j = 0; j < g; ++j) {
      const float w = scores[static_cast<int64_t>(j) * n_ctx + i];
      float* o = out + j * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += w * row[d];
    }
  }
}

}  // namespace

void detail::attention_group_portable(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                                      const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  for (int i = 0; i < r.n_q; ++i)
    attention_one(r, r.q + i * r.q_stride, g, head_dim, scale, k, v, kv_head, block_table, r.n_ctx + i, scratch,
                  r.out + i * r.out_stride);
}

void rms_norm_row(const float* x, const float* w, float eps, float* y, int64_t n) {
  if (use_avx512()) return detail::rms_norm_row_avx512(x, w, eps, y, n);
  detail::rms_norm_row_portable(x, w, eps, y, n);
}

void add_row(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void silu_mul_row(const float* gate, const float* up, float* out, int64_t n) {
  if (use_avx512()) return detail::silu_mul_row_avx512(gate, up, out, n);
  if (detail::ops_have_avx2()) return detail::silu_mul_row_avx2(gate, up, out, n);
  detail::silu_mul_row_portable(gate, up, out, n);
}

void softmax_row(float* x, int64_t n) {
  if (use_avx512()) return detail::softmax_row_avx512(x, n);
  detail::softmax_row_portable(x, n);
}

void rope_inv_freq(const RopeParams& p, double* inv_freq) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
    if (p.freq_factors != nullptr) inv_freq[i] /= static_cast<double>(p.freq_factors[i]);
  }
}

void rope_angles(const RopeParams& p, const double* inv_freq, double pos, float* cos_out, float* sin_out) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    const double angle = pos * static_cast<double>(p.freq_scale) * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_apply(float* x, int n_heads, int head_dim, const RopeParams& p, const float* cos_v,
                const float* sin_v) {
  const int half = p.n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = p.neox ? i : 2 * i;
      const int b = p.neox ? i + half : 2 * i + 1;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * cos_v[i] - x1 * sin_v[i];
      xh[b] = x0 * sin_v[i] + x1 * cos_v[i];
    }
  }
}

void kv_store_row(const KvPool& pool, int64_t slot, const float* row) {
  kv_save(pool, slot * pool.row_bytes(), pool.row_elems(), row);
}

void kv_load_rows(const KvPool& pool, int64_t slot, int64_t n_slots, float* out) {
  kv_load(pool, slot * pool.row_bytes(), n_slots * pool.row_elems(), out);
}

void attention_group(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                     const KvPool& v, int kv_head, const int32_t* block_table, float* scratch) {
  attention_heads(r, g, 1, head_dim, scale, k, v, kv_head, block_table, scratch);
}

void attention_heads(const AttnRows& r, int g, int n_kv, int head_dim, float scale, const KvPool& k,
                     const KvPool& v, int kv_head0, const int32_t* block_table, float* scratch) {
  if (use_avx512() && head_dim <= 256)
    return detail::attention_heads_avx512(r, g, n_kv, head_dim, scale, k, v, kv_head0, block_table, scratch);
  for (int h = 0; h < n_kv; ++h) {  // the two-pass kernels: one head at a time
    AttnRows rh = r;
    rh.q += static_cast<int64_t>(h) * g * head_dim;
    rh.out += static_cast<int64_t>(h) * g * head_dim;
    if (detail::ops_have_avx2() && head_dim <= 256)
      detail::attention_group_avx2(rh, g, head_dim, scale, 0, 0.0f, k, v, kv_head0 + h, block_table, scratch);
    else
      detail::attention_group_portable(rh, g, head_dim, scale, k, v, kv_head0 + h, block_table, scratch);
  }
}

void kv_rope_block(const KvPool& k, int64_t block, const RopeParams& p, const float* cos_v,
                   const float* sin_v) {
  const int64_t n = k.row_elems();
  float row_buf[4096];  // one slot's K row; larger rows go through the heap
  float* row = row_buf;
  std::unique_ptr<float[]> heap;
  if (n > 4096) {
    heap.reset(new float[static_cast<size_t>(n)]);
    row = heap.get();
  }
  for (int s = 0; s < k.block_size; ++s) {
    const int64_t off = (block * k.block_size + s) * k.row_bytes();
    kv_load(k, off, n, row);
    rope_apply(row, k.n_kv_heads, k.head_dim, p, cos_v, sin_v);
    kv_save(k, off, n, row);
  }
}

void kv_copy_block(const KvPool& pool, int64_t src, int64_t dst) {
  const size_t bytes = static_cast<size_t>(pool.block_bytes());
  const auto* base = static_cast<uint8_t*>(pool.data);
  std::memmove(static_cast<uint8_t*>(pool.data) + dst * bytes, base + src * bytes, bytes);
}

void kv_copy_slot(const KvPool& pool, int64_t src, int64_t dst) {
  const size_t bytes = static_cast<size_t>(pool.row_bytes());
  auto* base = static_cast<uint8_t*>(pool.data);
  std::memmove(base + dst * bytes, base + src * bytes, bytes);
}

}  // namespace pagoda::cpu
