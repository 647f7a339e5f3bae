// CudaBackend's mixture-of-experts pieces: F32 router weights and their GEMM, and moe_ffn, the
// routed experts of a step. The routing arrives from the host
// (engine/model/moe_ffn.cpp), so the grouping by expert is done on the host too and uploaded in
// one copy; then a gather, the experts' matmuls over their gathered rows, one SiLU-multiply over
// all rows, and the weighted combine kernel. The matmuls: in quantized (int8) mode the gathered
// rows are quantized once per matrix input (not per expert) and the experts with c <=
// kQuantGemvMaxRows rows run as one grouped dp4a launch per count c and matrix (a decode step
// of a 128-expert model touches tens of experts per layer: a few launches instead of one per
// expert and matrix); an expert with more rows, or a weight type the GEMV lacks, takes matmul
// on its slice of the stacked matrix (the tensor-core GEMM, or with QuantGemm::DequantCublas the
// scratch + cuBLAS path, or bf16 mode's kernels).
#include <cstring>

#include "engine/backend/cuda/backend_cuda_impl.h"
#include "kernels/cuda/ops.h"

namespace pagoda {
namespace {

// Rows [first, first + rows) of a row-major tensor (a weight in its device type, or F32).
Tensor rows_of(const Tensor& t, int64_t first, int64_t rows) {
  Tensor v = t;
  v.data = static_cast<uint8_t*>(t.data) + static_cast<size_t>(first) * ggml_row_size(t.type, t.cols);
  v.rows = rows;
  return v;
}

}  // namespace

Tensor CudaBackend::upload_weight_f32(const float* host_data, int64_t rows, int64_t cols) {
  Impl& m = *impl_;
  require(rows > 0 && cols > 0, "upload_weight_f32: rows and cols must be positive");
  CUDA_CHECK(cudaSetDevice(m.device));
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
  Tensor t{m.device_alloc(bytes), GgmlType::F32, rows, cols};
  m.weight_bytes += bytes;
  CUDA_CHECK(cudaMemcpyAsync(t.data, host_data, bytes, cudaMemcpyHostToDevice, m.stream));
  CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the host copy may go away after loading
  return t;
}

void CudaBackend::matmul_f32(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  // As matmul's bf16 GEMM (row-major out = x W^T), all in F32.
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(n),
                            static_cast<int>(w.cols), &alpha, w.data, CUDA_R_32F, static_cast<int>(w.cols),
                            x.data, CUDA_R_32F, static_cast<int>(x.cols), &beta, out.data, CUDA_R_32F,
                            static_cast<int>(out.cols), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts,
                          const float* weights, int k, const Tensor* shared,
                          const float* shared_weights, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  const int64_t ne = w.n_experts;
  require(ne > 0 && k > 0 && k <= ne, "moe_ffn: need 1 <= k <= n_experts");
  require(w.gate.rows % ne == 0 && w.gate.rows == w.up.rows && w.gate.cols == x.cols && w.up.cols == x.cols,
          "moe_ffn: gate/up must be [n_experts*ff x dim]");
  const int64_t dim = x.cols, ff = w.gate.rows / ne, rows = n * k;
  require(w.down.rows == ne * dim && w.down.cols == ff, "moe_ffn: down must be [n_experts*dim x ff]");
  require(out.cols == dim && n <= x.rows && n <= out.rows && x.data != out.data, "moe_ffn: x/out shapes");
  require(shared == nullptr || (shared->cols == dim && n <= shared->rows && shared_weights),
          "moe_ffn: shared expert output shape");
  if (n <= 0) return;
  cpu::moe_group(experts, n, k, w.n_experts, m.moe_groups);
  const cpu::MoeGroups& g = m.moe_groups;
  const auto count = [&](int e) { return g.offsets[static_cast<size_t>(e) + 1] - g.offsets[static_cast<size_t>(e)]; };

  // The grouped GEMV's table: (expert, first row) of every expert with c rows, c = 1..max, in
  // order of c; bucket[c] is where count c starts.
  const bool grouped = m.weights == CudaWeights::Quantized;
  constexpr int kMax = cuda::kQuantGemvMaxRows;
  int bucket[kMax + 2] = {};
  std::vector<int32_t>& table = m.moe_table;
  table.clear();
  if (grouped)
    for (int c = 1; c <= kMax; ++c) {
      bucket[c] = static_cast<int>(table.size() / 2);
      for (int e = 0; e < ne; ++e)
        if (count(e) == c) table.insert(table.end(), {e, g.offsets[static_cast<size_t>(e)]});
    }
  bucket[kMax + 1] = static_cast<int>(table.size() / 2);

  // One upload: [token of each gathered row][place of each entry][weights][shared weights][table].
  m.moe_host.resize(static_cast<size_t>(3 * rows + n) + table.size());
  int32_t* h = m.moe_host.data();
  for (int64_t r = 0; r < rows; ++r) h[r] = g.entries[static_cast<size_t>(r)] / k;
  std::memcpy(h + rows, g.place.data(), sizeof(int32_t) * static_cast<size_t>(rows));
  std::memcpy(h + 2 * rows, weights, sizeof(float) * static_cast<size_t>(rows));
  if (shared) std::memcpy(h + 3 * rows, shared_weights, sizeof(float) * static_cast<size_t>(n));
  if (!table.empty()) std::memcpy(h + 3 * rows + n, table.data(), sizeof(int32_t) * table.size());
  auto* d = static_cast<int32_t*>(m.moe_index.get(m.moe_host.size() * sizeof(int32_t), m.stream));
  // From pageable memory: returns once the bytes are staged, so moe_host may change afterwards.
  CUDA_CHECK(cudaMemcpyAsync(d, h, m.moe_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, m.stream));
  const int32_t* d_table = d + 3 * rows + n;

  const auto buffer = [&](DeviceScratch& s, int64_t cols) {
    return Tensor{s.get(static_cast<size_t>(rows * cols) * sizeof(float), m.stream), GgmlType::F32, rows, cols};
  };
  Tensor xg = buffer(m.moe_xg, dim), gate = buffer(m.moe_gate, ff), up = buffer(m.moe_up, ff), y = buffer(m.moe_y, dim);
  cuda::gather_rows(f32(x), d, rows, dim, f32(xg), m.s());

  // dst[first..] = src[first..] W_e^T for every expert e, W stacked with `per` rows per expert;
  // the inputs src quantized once when a grouped launch will read them.
  const auto experts_matmul = [&](const Tensor& src, std::initializer_list<std::pair<const Tensor*, Tensor*>> mats,
                                  int64_t per) {
    bool done[kMax + 1] = {};
    if (grouped && bucket[kMax + 1] > 0) {
      const void* acts = quantize_acts(src, rows);
      for (int c = 1; c <= kMax; ++c) {
        const int groups = bucket[c + 1] - bucket[c];
        if (groups == 0) continue;
        bool all = true;
        for (const auto& [wm, dst] : mats)
          all = cuda::gemv_quant_dp4a_grouped(wm->data, wm->type, d_table + 2 * bucket[c], groups, acts, rows,
                                              f32(*dst), c, per, wm->cols, dst->cols, m.s()) && all;
        done[c] = all;  // a type the GEMV lacks returns false for every bucket: all or none
      }
    }
    for (int e = 0; e < ne; ++e) {
      const int64_t first = g.offsets[static_cast<size_t>(e)], cnt = count(e);
      if (cnt == 0 || (cnt <= kMax && done[cnt])) continue;
      for (const auto& [wm, dst] : mats) {
        Tensor dv = rows_of(*dst, first, cnt);
        matmul(rows_of(*wm, e * per, per), rows_of(src, first, cnt), dv, cnt);
      }
    }
  };
  experts_matmul(xg, {{&w.gate, &gate}, {&w.up, &up}}, ff);
  silu_mul(gate, up, gate, rows);
  experts_matmul(gate, {{&w.down, &y}}, dim);
  cuda::moe_combine(f32(y), d + rows, reinterpret_cast<const float*>(d + 2 * rows), k,
                    shared ? f32(*shared) : nullptr, reinterpret_cast<const float*>(d + 3 * rows), n, dim,
                    f32(out), m.s());
}

}  // namespace pagoda
