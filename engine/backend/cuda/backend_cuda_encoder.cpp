// CudaBackend's encoder ops: host rows in (write), LayerNorm and bidirectional attention within
// each input (kernels/cuda/encoder.cu; the input bounds uploaded as int32 per call).
#include <algorithm>
#include <limits>

#include "engine/backend/cuda/backend_cuda_impl.h"

namespace pagoda {

void CudaBackend::write(Tensor& x, const float* host, int64_t n) {
  require(x.type == GgmlType::F32 && n >= 0 && n <= x.rows, "write: bad row count");
  if (n == 0) return;
  // From pageable memory: returns once the bytes are staged, so `host` may change afterwards.
  CUDA_CHECK(cudaMemcpyAsync(x.data, host, static_cast<size_t>(n * x.cols) * sizeof(float), cudaMemcpyHostToDevice,
                             impl_->stream));
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                             int64_t n) {
  require(weight.cols == x.cols && bias.cols == x.cols && out.cols == x.cols && n <= x.rows && n <= out.rows,
          "layer_norm: shape mismatch");
  cuda::layer_norm(f32(x), f32(weight), f32(bias), eps, f32(out), n, x.cols, impl_->s());
}

void CudaBackend::encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                                    const std::vector<int64_t>& starts, int n_heads, int head_dim) {
  Impl& m = *impl_;
  const int64_t d = int64_t(n_heads) * head_dim;
  require(!starts.empty() && starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()) &&
              starts.back() <= std::numeric_limits<int32_t>::max(),
          "encoder_attention: starts must rise from 0");
  const int64_t n = starts.back();
  require(q.cols == d && k.cols == d && v.cols == d && out.cols == d && n <= q.rows && n <= k.rows && n <= v.rows &&
              n <= out.rows,
          "encoder_attention: shape mismatch");
  int64_t max_len = 0;
  m.encoder_starts.assign(starts.begin(), starts.end());
  for (size_t b = 0; b + 1 < starts.size(); ++b) max_len = std::max(max_len, starts[b + 1] - starts[b]);
  const size_t bytes = m.encoder_starts.size() * sizeof(int32_t);
  auto* d_starts = static_cast<int32_t*>(m.encoder_index.get(bytes, m.stream));
  // From pageable memory: returns once the bytes are staged, so encoder_starts may change afterwards.
  CUDA_CHECK(cudaMemcpyAsync(d_starts, m.encoder_starts.data(), bytes, cudaMemcpyHostToDevice, m.stream));
  cuda::encoder_attention(f32(q), f32(k), f32(v), f32(out), d_starts, int(starts.size()) - 1, n, int(max_len),
                          n_heads, head_dim, m.s());
}

}  // namespace pagoda
