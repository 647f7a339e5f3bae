// CudaBackend's mixture-of-experts pieces: F32 router weights and their GEMM, and the routed
// experts of a step, two ways:
// - moe_ffn: the routing arrives from the host (engine/model/moe_ffn.cpp), so the grouping by
//   expert is done on the host too and uploaded in one copy;
// - moe_ffn_routed (quantized mode, up to kMoeRouteMaxTokens tokens: decode steps): the routing
//   and grouping run on the device from the router's logits (kernels/cuda/moe_route.cu) and the
//   grouped GEMVs read their group counts from there, launching the most groups a count can
//   have: no host round-trip, launches fixed by the step's shape, so the step can be a graph.
// Both then gather, run the experts' matmuls over their gathered rows, one SiLU-multiply over
// all rows, and the weighted combine kernel (moe_experts). The matmuls: in quantized (int8) mode the gathered
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

// The work after the routing: gather x's rows per expert (token_of_row), gate/up matmuls,
// SiLU-multiply, down matmul, combine (place, weights, shared_weights: device arrays). `mats`
// runs dst = src W_e^T for every expert over its gathered rows of src (W stacked with `per` rows
// per expert).
void CudaBackend::moe_experts(const ExpertWeights& w, const Tensor& x, const int32_t* token_of_row,
                              const int32_t* place, const float* weights, const float* shared_weights, int k,
                              const Tensor* shared, Tensor& out, int64_t n, const ExpertsMatmul& mats) {
  Impl& m = *impl_;
  const int64_t dim = x.cols, ff = w.gate.rows / w.n_experts, rows = n * k;
  const auto buffer = [&](DeviceScratch& s, int64_t cols) {
    return Tensor{s.get(static_cast<size_t>(rows * cols) * sizeof(float), m.stream), GgmlType::F32, rows, cols};
  };
  Tensor xg = buffer(m.moe_xg, dim), gate = buffer(m.moe_gate, ff), up = buffer(m.moe_up, ff), y = buffer(m.moe_y, dim);
  cuda::gather_rows(f32(x), token_of_row, rows, dim, f32(xg), m.s());
  mats(xg, {{&w.gate, &gate}, {&w.up, &up}}, ff);
  silu_mul(gate, up, gate, rows);
  mats(gate, {{&w.down, &y}}, dim);
  cuda::moe_combine(f32(y), place, weights, k, shared ? f32(*shared) : nullptr, shared_weights, n, dim, f32(out),
                    m.s());
}

namespace {

void check_moe(const ExpertWeights& w, const Tensor& x, int k, const Tensor* shared, const Tensor& out, int64_t n) {
  const int64_t ne = w.n_experts;
  require(ne > 0 && k > 0 && k <= ne, "moe_ffn: need 1 <= k <= n_experts");
  require(w.gate.rows % ne == 0 && w.gate.rows == w.up.rows && w.gate.cols == x.cols && w.up.cols == x.cols,
          "moe_ffn: gate/up must be [n_experts*ff x dim]");
  const int64_t dim = x.cols, ff = w.gate.rows / ne;
  require(w.down.rows == ne * dim && w.down.cols == ff, "moe_ffn: down must be [n_experts*dim x ff]");
  require(out.cols == dim && n <= x.rows && n <= out.rows && x.data != out.data, "moe_ffn: x/out shapes");
  require(shared == nullptr || (shared->cols == dim && n <= shared->rows), "moe_ffn: shared expert output shape");
}

// Whether the int8 GEMV takes a matrix of this type and width.
bool dp4a_takes(const Tensor& t) {
  return cuda::is_device_quant_type(t.type) && t.cols % 32 == 0 && t.cols % ggml_type_info(t.type).block_size == 0;
}

}  // namespace

bool CudaBackend::moe_routes_on_device(const ExpertWeights& w, int64_t n) const {
  return impl_->weights == CudaWeights::Quantized && n >= 1 && n <= cuda::kMoeRouteMaxTokens && w.n_experts > 0 &&
         dp4a_takes(w.gate) && dp4a_takes(w.up) && dp4a_takes(w.down);
}

void CudaBackend::moe_ffn_routed(const ExpertWeights& w, const Tensor& x, const Tensor& logits, int k, bool normalize,
                                 const Tensor* shared, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  check_moe(w, x, k, shared, out, n);
  require(moe_routes_on_device(w, n), "moe_ffn_routed: these experts or this many rows route on the host");
  require(logits.type == GgmlType::F32 && logits.cols >= w.n_experts + (shared ? 1 : 0) && n <= logits.rows,
          "moe_ffn_routed: logits shape");
  const cuda::MoeRouteLayout L = cuda::moe_route_layout(n, k, w.n_experts);
  auto* d = static_cast<int32_t*>(m.moe_index.get(L.bytes, m.stream));
  cuda::moe_route(f32(logits), logits.cols, n, w.n_experts, k, normalize, shared != nullptr, d, m.s());
  const int64_t rows = n * k;
  const ExpertsMatmul grouped = [&](const Tensor& src, MoeMats mats, int64_t per) {
    const void* acts = quantize_acts(src, rows);
    for (int c = 1; c <= n; ++c) {
      if (L.table_cap[c] == 0) continue;
      for (const auto& [wm, dst] : mats)
        require(cuda::gemv_quant_dp4a_grouped_dev(wm->data, wm->type, d + L.table_at[c], L.table_cap[c],
                                                  d + L.n_groups + c, acts, rows, f32(*dst), c, per, wm->cols,
                                                  dst->cols, m.s()),
                "moe_ffn_routed: the int8 GEMV refused an expert matrix");
    }
  };
  moe_experts(w, x, d + L.token_of_row, d + L.place, reinterpret_cast<const float*>(d + L.weights),
              reinterpret_cast<const float*>(d + L.shared_weights), k, shared, out, n, grouped);
}

void CudaBackend::moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts,
                          const float* weights, int k, const Tensor* shared,
                          const float* shared_weights, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  check_moe(w, x, k, shared, out, n);
  require(shared == nullptr || shared_weights, "moe_ffn: shared expert weights");
  const int64_t ne = w.n_experts, rows = n * k;
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

  // dst[first..] = src[first..] W_e^T for every expert e, W stacked with `per` rows per expert;
  // the inputs src quantized once when a grouped launch will read them.
  const ExpertsMatmul experts_matmul = [&](const Tensor& src, MoeMats mats, int64_t per) {
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
  moe_experts(w, x, d, d + rows, reinterpret_cast<const float*>(d + 2 * rows),
              reinterpret_cast<const float*>(d + 3 * rows), k, shared, out, n, experts_matmul);
}

}  // namespace pagoda
