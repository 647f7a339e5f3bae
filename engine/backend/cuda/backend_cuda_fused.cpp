// CudaBackend's fused ops: the residual add, the RMSNorm and the next matmuls' input forms in
// one kernel (kernels/cuda/rms_norm.cu), and RoPE with the K/V store in one kernel
// (kernels/cuda/rope_store_kv.cu). Each gives what the default composition of separate ops
// (Backend::add_rms_norm, add_rms_norm_matmuls, rope_store_kv) gives, bit for bit: the kernels
// share the separate kernels' device code, and every matmul runs the path matmul_same_x would
// pick, only reading its input form from the norm's launch instead of converting or quantizing
// xn again.
#include "engine/backend/cuda/backend_cuda_impl.h"

namespace pagoda {
namespace {

void check_norm(const Tensor& x, const Tensor* residual, const Tensor& weight, const Tensor& out, int64_t n) {
  require(weight.type == GgmlType::F32 && weight.rows * weight.cols == x.cols && out.cols == x.cols && n <= x.rows &&
              n <= out.rows,
          "rms_norm: shape mismatch");
  require(residual == nullptr || (residual->cols == x.cols && n <= residual->rows), "add: shape mismatch");
}

}  // namespace

void CudaBackend::add_rms_norm(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                               int64_t n) {
  check_norm(x, residual, weight, out, n);
  cuda::rms_norm_fused(f32(x), residual ? f32(*residual) : nullptr, f32(weight), eps, f32(out), nullptr, nullptr, n,
                       x.cols, impl_->s());
}

void CudaBackend::add_rms_norm_matmuls(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& xn,
                                       const Tensor* const* w, int count, Tensor* const* out, int64_t n) {
  Impl& m = *impl_;
  check_norm(x, residual, weight, xn, n);
  bool any_quant = false, any_bf16 = false;
  for (int j = 0; j < count; ++j) {
    require(xn.cols == w[j]->cols && out[j]->cols == w[j]->rows && n <= out[j]->rows, "matmul: shape mismatch");
    any_quant |= cuda::is_device_quant_type(w[j]->type);
    any_bf16 |= w[j]->type == GgmlType::BF16;
  }
  if (n <= 0) return;
  // The forms the matmuls below read: int8 blocks where matmul_quant would quantize xn for the
  // dp4a GEMV, bf16 where matmul would convert it.
  const bool q8 = any_quant && m.weights == CudaWeights::Quantized && n <= cuda::kQuantGemvMaxRows && xn.cols % 32 == 0;
  void* acts = q8 ? m.q8_x.get(cuda::q8_acts_layout(n, xn.cols).bytes, m.stream) : nullptr;
  void* xb = any_bf16 ? m.bf16_x.get(static_cast<size_t>(n * xn.cols) * 2, m.stream) : nullptr;
  cuda::rms_norm_fused(f32(x), residual ? f32(*residual) : nullptr, f32(weight), eps, f32(xn), acts, xb, n, x.cols,
                       m.s());
  for (int j = 0; j < count; ++j) {
    const Tensor& wj = *w[j];
    Tensor& oj = *out[j];
    if (wj.type == GgmlType::BF16) {
      matmul_bf16(wj, xb, oj, n);
    } else if (cuda::is_device_quant_type(wj.type)) {
      if (acts && cuda::gemv_quant_dp4a(wj.data, wj.type, acts, f32(oj), n, wj.rows, wj.cols, oj.cols, m.s())) continue;
      // (With QuantGemm::DequantCublas this may convert xn into bf16_x again: the same bytes as xb.)
      matmul_quant(wj, xn, oj, n);
    } else {
      matmul(wj, xn, oj, n);
    }
  }
}

void CudaBackend::rope_store_kv(int layer, Tensor& q, Tensor& k, const Tensor& v, int n_heads, int n_kv_heads,
                                const RopeConfig& rope) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  const int64_t kv_dim = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  // Shapes the fused kernel does not take (heads of another width than the cache's) go the
  // separate way, whose ops say what is wrong.
  if (n_heads <= 0 || q.cols != static_cast<int64_t>(n_heads) * kv.head_dim || n_kv_heads != kv.n_kv_heads ||
      k.cols != kv_dim || v.cols != kv_dim || rope.head_dim <= 0 || rope.head_dim > kv.head_dim ||
      rope.head_dim % 2 != 0) {
    Backend::rope_store_kv(layer, q, k, v, n_heads, n_kv_heads, rope);
    return;
  }
  require(q.rows >= m.n_tokens && k.rows >= m.n_tokens && v.rows >= m.n_tokens, "rope_store_kv: shape mismatch");
  cuda::rope_store_kv(f32(q), f32(k), f32(v), m.dev(m.off_positions), m.dev(m.off_slots), m.n_tokens, n_heads,
                      rope.head_dim, rope.freq_base, rope.freq_scale, rope.neox, rope_freq_factors(rope),
                      kv, m.s());
}

}  // namespace pagoda
