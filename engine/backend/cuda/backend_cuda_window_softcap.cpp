// CudaBackend's ops of the gemma/phi3 forward: attention with a sliding window and/or
// soft-capped scores (decode rows: attention_decode's split kernel; prefill tiles: Impl::attend_tiles,
// the tensor-core kernel or attention_window_softcap.cu's exact one),
// scaling, the tanh-GELU gate and logit soft-capping.
#include "engine/backend/cuda/backend_cuda_impl.h"

namespace pagoda {

void CudaBackend::attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                                int head_dim, float scale, const AttentionExtras& extras) {
  Impl& m = *impl_;
  const cuda::PagedKv kv = m.layer_kv(layer);
  require(n_kv_heads == kv.n_kv_heads && head_dim == kv.head_dim,
          "attention_ext: heads or head_dim differ from the KV cache's");
  require(n_heads > 0 && n_heads % n_kv_heads == 0, "attention_ext: n_heads not a multiple of n_kv_heads");
  require(extras.window >= 0 && extras.softcap >= 0, "attention_ext: negative window or softcap");
  const int64_t q_cols = static_cast<int64_t>(n_heads) * head_dim;
  require(q.cols == q_cols && out.cols == q_cols && q.rows >= m.n_tokens && out.rows >= m.n_tokens,
          "attention_ext: q/out shape mismatch");
  const cuda::AttnIndex idx = m.attn_index();
  if (m.n_decode > 0) {  // split over the context, as attention()'s decode rows
    const size_t ws_floats = cuda::attention_decode_workspace(m.n_decode, n_heads, head_dim, m.max_decode_ctx);
    float* ws = ws_floats ? static_cast<float*>(m.attn_ws.get(ws_floats * sizeof(float), m.stream)) : nullptr;
    cuda::attention_decode(f32(q), f32(out), n_heads, scale, kv, idx, m.dev(m.off_decode), m.n_decode,
                           m.max_decode_ctx, ws, m.s(), extras.window, extras.softcap);
  }
  m.attend_tiles(kv, f32(q), f32(out), n_heads, scale, extras.window, extras.softcap);
}

void CudaBackend::apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer) {
  Impl& m = *impl_;
  require(static_cast<int>(rope_of_layer.size()) == m.kv.n_layers, "apply_cache_edits_per_layer: one RoPE per layer");
  // The copies (apply_cache_edits with the shifts held back), then each layer's shifts through a
  // one-layer view of the pools.
  const int64_t n_shifts = m.n_shifts;
  m.n_shifts = 0;
  apply_cache_edits(rope_of_layer.front());
  m.n_shifts = n_shifts;
  if (n_shifts == 0) return;
  for (int l = 0; l < m.kv.n_layers; ++l) {
    const RopeConfig& r = rope_of_layer[static_cast<size_t>(l)];
    const Tensor& ff = r.freq_factors;
    require(ff.data == nullptr || (ff.type == GgmlType::F32 && ff.rows == 1 && ff.cols == r.head_dim / 2),
            "apply_cache_edits_per_layer: freq_factors must be one F32 row of head_dim/2 values");
    cuda::KvPools one = m.pools();
    one.k_base = static_cast<uint16_t*>(m.k_pool) + l * m.k_layer_stride;  // halves
    one.v_base = static_cast<uint16_t*>(m.v_pool) + l * m.v_layer_stride;
    one.n_layers = 1;
    cuda::k_shift(one, m.dev(m.off_shifts), static_cast<int>(n_shifts), r.head_dim, r.freq_base, r.freq_scale,
                  r.neox, m.s(), static_cast<const float*>(ff.data));
  }
}

void CudaBackend::scale(Tensor& x, float s, int64_t n) {
  require(n <= x.rows, "scale: n exceeds the rows");
  cuda::scale(f32(x), s, n, x.cols, impl_->s());
}

void CudaBackend::gelu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) {
  require(gate.cols == up.cols && out.cols == gate.cols && n <= gate.rows && n <= up.rows && n <= out.rows,
          "gelu_mul: shape mismatch");
  cuda::gelu_mul(f32(gate), f32(up), f32(out), n, gate.cols, impl_->s());
}

void CudaBackend::softcap(Tensor& x, float cap, int64_t n) {
  require(cap > 0 && n <= x.rows, "softcap: the cap must be positive and n at most the rows");
  cuda::softcap(f32(x), cap, n, x.cols, impl_->s());
}

}  // namespace pagoda
