// CudaBackend's LoRA op: the group's row indices go up in one copy (from pageable memory, so
// the host array may change once the call returns), then kernels/cuda/lora.cu adds the update
// to each gathered row. The adapters' matrices are F32 device copies (upload_weight_f32).
#include <string>

#include "engine/backend/cuda/backend_cuda_impl.h"
#include "kernels/cuda/lora.h"

namespace pagoda {

void CudaBackend::lora_add(const LoraRows& g, const Tensor& x, Tensor& out) {
  Impl& m = *impl_;
  const int64_t rank = g.a.rows;
  require(g.a.type == GgmlType::F32 && g.b.type == GgmlType::F32, "lora_add: adapter matrices must be F32");
  require(g.a.cols == x.cols && g.b.rows == out.cols && g.b.cols == rank && rank > 0 && rank <= cuda::kLoraMaxRank,
          "lora_add: A and B do not fit x -> out");
  for (int64_t i = 0; i < g.n_rows; ++i)
    require(g.rows[i] >= 0 && g.rows[i] < x.rows && g.rows[i] < out.rows, "lora_add: a row is outside the activations");
  if (g.n_rows <= 0) return;
  const size_t bytes = static_cast<size_t>(g.n_rows) * sizeof(int32_t);
  auto* d_rows = static_cast<int32_t*>(m.lora_rows.get(bytes, m.stream));
  CUDA_CHECK(cudaMemcpyAsync(d_rows, g.rows, bytes, cudaMemcpyHostToDevice, m.stream));
  cuda::lora_add(static_cast<const float*>(g.a.data), static_cast<const float*>(g.b.data), static_cast<int>(rank),
                 x.cols, out.cols, g.scale, static_cast<const float*>(x.data), static_cast<float*>(out.data), d_rows,
                 g.n_rows, m.stream);
}

}  // namespace pagoda
