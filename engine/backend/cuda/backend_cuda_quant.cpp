// CudaBackend's quantized weights (CudaWeights::Quantized, QuantizedF32): upload keeps a matrix
// in its GGUF blocks on the device (the same bytes as the file), and matmul multiplies from them:
// - n <= kQuantGemvMaxRows activation rows (decode of a few sequences): one kernel reads each
//   weight block once for all rows: gemv_quant_dp4a on x quantized to int8 blocks of 32 by
//   quantize_acts_q8 (Quantized; the CPU backend's int8 scheme), or gemv_quant on f32 x
//   (QuantizedF32). x is quantized once per matmul_same_x call, so a layer's q/k/v (and its
//   gate/up) share one quantization launch;
// - more rows with batch_invariant (Quantized): gemm_quant_int8 on the same int8 activations,
//   the GEMV's bits for every row at any n (kernels/cuda/gemm_int8_mma.cu);
// - more rows otherwise (prefill, large decode batches): by default (QuantGemm::Mma) gemm_quant_mma, a
//   tensor-core GEMM that decodes tiles of the blocks into shared memory as bf16 and rounds x
//   to bf16 on the way in (the same inputs as the bf16 path): no bf16 copy of any matrix. With
//   QuantGemm::DequantCublas (for comparison) the matrix is dequantized into wq_scratch, one
//   bf16 buffer reused by every such GEMM and sized at upload for the largest matrix (so it is
//   allocated before the KV cache is planned, never during a graph capture), then the bf16
//   cuBLAS GEMM runs as in bf16 mode: one extra write and read of the matrix per GEMM and a
//   scratch as large as the largest matrix (the output matrix: 1 GiB for llama3-8b). Which is
//   faster at which row count is not yet measured on a GPU (scripts/gpu-check.sh lease runs
//   both at 512 and 2,048 tokens).
#include "engine/backend/cuda/backend_cuda_impl.h"

namespace pagoda {

Tensor CudaBackend::upload_quantized(const void* host_data, GgmlType type, int64_t rows, int64_t cols) {
  Impl& m = *impl_;
  require(rows > 0 && cols > 0, "upload_weight: rows and cols must be positive");
  const GgmlTypeInfo& info = ggml_type_info(type);
  require(cols % info.block_size == 0, "upload_weight: row length not a multiple of the block");
  CUDA_CHECK(cudaSetDevice(m.device));
  const size_t bytes = ggml_row_size(type, cols) * static_cast<size_t>(rows);
  Tensor out{m.device_alloc(bytes), type, rows, cols};
  CUDA_CHECK(cudaMemcpyAsync(out.data, host_data, bytes, cudaMemcpyHostToDevice, m.stream));
  m.weight_bytes += bytes;
  // The scratch a larger-batch cuBLAS GEMM dequantizes this matrix into: grown to exactly the
  // largest matrix, here at load where allocating is allowed.
  const size_t scratch = static_cast<size_t>(rows * cols) * 2;
  if (m.quant_gemm == QuantGemm::DequantCublas && scratch > m.wq_scratch.bytes) {
    CUDA_CHECK(cudaStreamSynchronize(m.stream));
    if (m.wq_scratch.ptr) CUDA_CHECK(cudaFree(m.wq_scratch.ptr));
    m.wq_scratch.ptr = nullptr;
    m.wq_scratch.bytes = 0;
    CUDA_CHECK(cudaMalloc(&m.wq_scratch.ptr, scratch));
    m.wq_scratch.bytes = scratch;
  }
  CUDA_CHECK(cudaStreamSynchronize(m.stream));  // the host copy may go away after loading
  if (!m.logged_dequant.count(type)) {
    m.logged_dequant.insert(type);
    spdlog::info("CUDA backend: {} weight matrices stay in their GGUF blocks on the device", info.name);
  }
  return out;
}

void CudaBackend::matmul_quant(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  constexpr int64_t kMax = cuda::kQuantGemvMaxRows;
  if (m.weights == CudaWeights::Quantized && (n <= kMax || m.batch_invariant) &&
      int8_matmul(w, quantize_acts(x, n), out, n))
    return;
  matmul_quant_rest(w, x, out, n);
}

bool CudaBackend::int8_matmul(const Tensor& w, const void* acts, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  if (n <= cuda::kQuantGemvMaxRows)
    return cuda::gemv_quant_dp4a(w.data, w.type, acts, f32(out), n, w.rows, w.cols, out.cols, m.s());
  return m.batch_invariant && cuda::gemm_quant_int8(w.data, w.type, acts, f32(out), n, w.rows, w.cols, out.cols, m.s());
}

void CudaBackend::matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) {
  Impl& m = *impl_;
  if (n <= 0 || (n > cuda::kQuantGemvMaxRows && !m.batch_invariant) || m.weights != CudaWeights::Quantized ||
      x.cols % 32 != 0) {
    Backend::matmul_same_x(w, count, x, out, n);
    return;
  }
  // x quantized once (every matrix here reads all x.cols columns); a matrix the int8 GEMV does
  // not take (F32, bf16, a shape it refuses) runs as matmul would run it.
  const void* acts = nullptr;
  for (int j = 0; j < count; ++j) {
    const Tensor& wj = *w[j];
    Tensor& oj = *out[j];
    require(x.cols == wj.cols && oj.cols == wj.rows && n <= x.rows && n <= oj.rows, "matmul: shape mismatch");
    if (cuda::is_device_quant_type(wj.type)) {
      if (!acts) acts = quantize_acts(x, n);
      if (int8_matmul(wj, acts, oj, n)) continue;
      matmul_quant_rest(wj, x, oj, n);
    } else {
      matmul(wj, x, oj, n);
    }
  }
}

const void* CudaBackend::quantize_acts(const Tensor& x, int64_t n) {
  Impl& m = *impl_;
  const cuda::Q8ActsLayout L = cuda::q8_acts_layout(n, x.cols);
  void* acts = m.q8_x.get(L.bytes, m.stream);
  cuda::quantize_acts_q8(f32(x), n, x.cols, x.cols, acts, m.s());
  return acts;
}

// The quantized matmul past the int8 GEMV: the f32-activation GEMV, else the tensor-core GEMM
// (or the scratch + cuBLAS).
void CudaBackend::matmul_quant_rest(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
  Impl& m = *impl_;
  if (cuda::gemv_quant(w.data, w.type, f32(x), f32(out), n, w.rows, w.cols, x.cols, out.cols, m.s())) return;
  if (m.quant_gemm == QuantGemm::Mma) {
    require(cuda::gemm_quant_mma(w.data, w.type, f32(x), f32(out), n, w.rows, w.cols, x.cols, out.cols, m.s()),
            "matmul: the quantized GEMM cannot take this shape");
    return;
  }
  const size_t need = static_cast<size_t>(w.rows * w.cols) * 2;
  require(need <= m.wq_scratch.bytes, "matmul: quantized matrix larger than any uploaded one");
  cuda::dequantize_to_bf16(w.data, w.type, w.rows * w.cols, m.wq_scratch.ptr, m.s());
  void* xb = m.bf16_x.get(static_cast<size_t>(n * x.cols) * 2, m.stream);
  cuda::convert_to_bf16(x.data, GgmlType::F32, n * x.cols, xb, m.s());
  gemm_bf16(m.wq_scratch.ptr, w.rows, w.cols, xb, out, n);
}

}  // namespace pagoda
