// CudaBackend: the Backend over kernels/cuda (NVIDIA GPUs, sm_80 / sm_90).
//
// - Weights (CudaBackendOptions::weights): quantized matrices (every GGML block type pagoda
//   reads) stay on the device in their GGUF bits by default (CudaWeights::Quantized,
//   backend_cuda_quant.cpp): up to kQuantGemvMaxRows activation rows multiply them directly,
//   with activations quantized to int8 once per input (matmul_same_x) and dp4a (kernels/cuda/gemv_dp4a.cu,
//   the CPU's int8 scheme) or, with CudaWeights::QuantizedF32, f32 activations and FMA
//   (kernels/cuda/gemv_quant.cu, exact products); more rows run a tensor-core GEMM that
//   decodes tiles of the blocks into shared memory as bf16 (kernels/cuda/gemm_quant_mma.cu),
//   or with QuantGemm::DequantCublas dequantize the matrix into one bf16 scratch sized at load
//   for the largest matrix and run the bf16 cuBLAS GEMM from it.
//   CudaWeights::Bf16 (and F16 / BF16 matrices always) convert to bf16 on upload, dequantizing
//   on the device. F32 matrices stay F32 (exact products as on the CPU, for twice bf16's
//   memory: F32 files are small models and tests); 1-D weights (norms, biases: rows == 1)
//   become F32. bf16 GEMMs run through cuBLAS (bf16 inputs, fp32 accumulate, fp32 output) or,
//   for up to kGemvMaxRows activation rows, kernels/cuda/gemv.cu; activations are converted to
//   bf16 just before each. F32 GEMMs run through cuBLAS in F32. init_kv_cache logs the bytes
//   the weights take on the device.
// - KV cache: F16, F32 or Q8_0 (KvCacheConfig::type; the CPU backend's byte layout,
//   kernels/kv_layout.h), one contiguous K pool and one V pool covering all layers.
// - One stream; ops only enqueue. The host waits in read() (and in finish_sampling()), at weight
//   upload, and when a scratch buffer must grow (rare, first steps of a bigger batch).
// - begin_step validates the plan as the CPU backend does, then copies every index array in one
//   transfer from a pinned staging buffer.
// - CUDA graphs (on by default, CudaBackendOptions::cuda_graphs): a step Model marks recordable (the
//   drawn rows in one LM-head chunk and the host rows in one more) whose every row goes to the
//   decode kernel (plain decode rows, and the token trees of speculative verify steps) is
//   captured on the second sight of its shape and replayed afterwards (cuda_graphs.h).
//   begin_step lays out the index buffer with the arrays the shape sizes first (a tree row's
//   slot list gets room for its longest possible path), so a shape's kernels always get the
//   same addresses; the decode attention's split count is part of the shape. Model pads plain
//   decode steps to row buckets (recorded_rows); verify steps run at their exact size.
// - Errors become exceptions: CUDA/cuBLAS failures throw pagoda::cuda::CudaError naming the call
//   with file:line; bad arguments throw std::invalid_argument.
// - Batch invariance: every custom kernel computes a row the same way whatever the batch (the
//   decode attention's splits depend only on the row's own context; the GEMVs give a row the
//   same bits at any n up to their limits), but by default the GEMVs hand over to a GEMM
//   (cuBLAS, or the quantized tensor-core GEMM, whose f32 sums differ from the GEMVs') above
//   their row limits, and cuBLAS may choose a different algorithm for a different number of
//   rows, so logits can differ in the last bits between batch sizes.
//   CudaBackendOptions::batch_invariant (--cuda-batch-invariant) closes that for quantized and
//   bf16 matrices: quantized matmuls of more than kQuantGemvMaxRows rows run gemm_quant_int8
//   (each row the int8 GEMV's bits), bf16 ones of more than kGemvMaxRows rows the bf16 GEMV in
//   chunks (test_cuda_batch), and attention follows SeqInStep::prefill rather than a chunk's
//   length (a prompt's one-token chunk takes a one-row prefill tile, each drawn token of a
//   longer chunk, a recompute after preemption say, the decode kernel), so a token's bits do not
//   depend on how its sequence was chunked or recomputed. Left: F32 matrices (MoE routers) on
//   cuBLAS (docs/cuda.md).
// What has been verified where is docs/cuda.md's to say.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_graphs.h"
#include "kernels/cuda/ops.h"

namespace pagoda {

// How quantized weight matrices are held on the device: in their GGUF blocks, read by the
// quantized kernels (about 0.5-1 byte a value), or dequantized to bf16 at load (2 bytes a
// value; the path before the quantized kernels, kept for comparison). Quantized decodes with
// int8 activations (dp4a); QuantizedF32 keeps the same weights but decodes with f32 activations
// and FMA, for comparison.
enum class CudaWeights { Quantized, QuantizedF32, Bf16 };

// "quantized", "quantized-f32" or "bf16" (the --cuda-weights flag); throws
// std::invalid_argument naming `flag`.
inline CudaWeights parse_cuda_weights(const std::string& s, const char* flag) {
  if (s == "quantized") return CudaWeights::Quantized;
  if (s == "quantized-f32") return CudaWeights::QuantizedF32;
  if (s == "bf16") return CudaWeights::Bf16;
  throw std::invalid_argument(std::string(flag) + " must be quantized, quantized-f32 or bf16, got '" + s + "'");
}
inline const char* cuda_weights_name(CudaWeights w) {
  return w == CudaWeights::Quantized ? "quantized" : w == CudaWeights::QuantizedF32 ? "quantized-f32" : "bf16";
}

// How a matmul of quantized weights with more than kQuantGemvMaxRows activation rows (prefill,
// large decode batches) runs: the tensor-core GEMM reading the blocks (kernels/cuda/
// gemm_quant_mma.cu), or by dequantizing the whole matrix into a bf16 scratch (sized at load
// for the largest matrix) for a cuBLAS GEMM, the earlier path, kept for comparison.
enum class QuantGemm { Mma, DequantCublas };

// "mma" or "cublas" (the --cuda-quant-gemm flag); throws
// std::invalid_argument naming `flag`.
inline QuantGemm parse_quant_gemm(const std::string& s, const char* flag) {
  if (s == "mma") return QuantGemm::Mma;
  if (s == "cublas") return QuantGemm::DequantCublas;
  throw std::invalid_argument(std::string(flag) + " must be mma or cublas, got '" + s + "'");
}
inline const char* quant_gemm_name(QuantGemm g) { return g == QuantGemm::Mma ? "mma" : "cublas"; }

// Which kernel runs the attention of prefill chunks: the tensor-core one (kernels/cuda/
// attention_prefill_mma.cu, f16 MMAs; head dims 64, 80, 96, 128 and 256, others fall back to the
// exact kernels) or the exact f32 CUDA-core kernels (attention_prefill.cu, attention_window_softcap.cu),
// kept for comparison.
enum class PrefillAttention { Mma, Exact };

// "mma" or "exact" (the --cuda-prefill-attention flag); throws std::invalid_argument naming `flag`.
inline PrefillAttention parse_prefill_attention(const std::string& s, const char* flag) {
  if (s == "mma") return PrefillAttention::Mma;
  if (s == "exact") return PrefillAttention::Exact;
  throw std::invalid_argument(std::string(flag) + " must be mma or exact, got '" + s + "'");
}
inline const char* prefill_attention_name(PrefillAttention a) { return a == PrefillAttention::Mma ? "mma" : "exact"; }

struct CudaBackendOptions {
  int device = 0;  // CUDA device ordinal
  CudaWeights weights = CudaWeights::Quantized;
  QuantGemm quant_gemm = QuantGemm::Mma;  // quantized modes, more than kQuantGemvMaxRows rows
  PrefillAttention prefill_attention = PrefillAttention::Mma;  // prefill chunks' attention
  // Record decode and verify steps as CUDA graphs and replay them (cuda_graphs.h); off: every step
  // launches its kernels one by one.
  // (cuBLAS always gets a fixed 32 MiB workspace, as capture requires, so both settings run
  // the same GEMMs.)
  bool cuda_graphs = true;
  // Quantized mode: matmuls of more than kQuantGemvMaxRows rows run the int8 tensor-core GEMM
  // (kernels/cuda/gemm_int8_mma.cu) instead of the bf16-input one, which gives every row the
  // bits the int8 GEMV gives it alone, so that a row gets the same bits whatever the number of
  // rows beside it (the GEMV's per-row result does not depend on n). It reads the weights once
  // per 16 activation rows (mostly from L2) and does the GEMV's float work per value.
  // bf16 matrices (CudaWeights::Bf16, BF16 / F16 files): matmuls of more than kGemvMaxRows rows
  // run the bf16 GEMV over chunks of kGemvMaxRows rows instead of cuBLAS, each chunk reading
  // the whole matrix (n / 4 passes). F32 matrices (MoE routers) stay on cuBLAS.
  // Attention: a prompt's one-token chunk takes the prefill kernel its longer chunks take (one
  // row in a tile) instead of the decode kernel, which sums in another order.
  // The --cuda-batch-invariant flag (BackendChoice::cuda_batch_invariant).
  // Off by default (its cost is not yet measured on a GPU).
  bool batch_invariant = false;
};

#ifdef PAGODA_HAVE_CUDA

// True when a usable CUDA device is present; otherwise false with the reason in *why (when
// given). For `--device auto`: pick CUDA when this is true, else fall back to the CPU.
bool cuda_available(std::string* why);

// A CUDA backend on opts.device; throws pagoda::cuda::CudaError (e.g. no device) on failure.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& opts = {});

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& opts = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  // The device's free and total memory (cudaMemGetInfo), device = true.
  MemoryInfo memory_info() const override;

  Tensor upload_weight(const void* host_data, GgmlType type, int64_t rows, int64_t cols) override;
  // Kept F32 on the device; matmul runs F32 weights as an F32 GEMM.
  Tensor upload_weight_f32(const float* host_data, int64_t rows, int64_t cols) override;
  Tensor alloc(int64_t rows, int64_t cols) override;
  size_t kv_block_bytes(const KvCacheConfig& cfg) const override;
  void init_kv_cache(const KvCacheConfig& cfg) override;

  // Validates the plan (slots, block ids, block tables long enough for every position, logit
  // rows, token_seq) and throws std::invalid_argument naming the fault; then uploads it.
  void begin_step(const StepPlan& plan) override;
  void apply_cache_edits(const RopeConfig& rope) override;

  void embed(const Tensor& table, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor& out, int64_t n) override;
  void matmul(const Tensor& w, const Tensor& x, Tensor& out, int64_t n) override;
  // Quantized (int8) mode at up to kQuantGemvMaxRows rows: x quantized once for all the
  // matrices (backend_cuda_quant.cpp); otherwise the matmuls.
  void matmul_same_x(const Tensor* const* w, int count, const Tensor& x, Tensor* const* out, int64_t n) override;
  void add_bias(Tensor& x, const Tensor& bias, int64_t n) override;
  void add(Tensor& x, const Tensor& y, int64_t n) override;
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) override;
  void rope(Tensor& x, int n_heads, const RopeConfig& rope) override;
  void store_kv(int layer, const Tensor& k, const Tensor& v) override;
  void attention(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                 int head_dim, float scale) override;
  void gather_logit_rows(const Tensor& x, Tensor& out) override;
  // The fused ops (backend_cuda_fused.cpp): the residual add, RMSNorm and the matmuls' input
  // forms (bf16 for bf16 matrices; int8 blocks in quantized mode at up to kQuantGemvMaxRows
  // rows) in one kernel; RoPE of Q and K with the K/V store in one kernel.
  void add_rms_norm(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                    int64_t n) override;
  void add_rms_norm_matmuls(Tensor& x, const Tensor* residual, const Tensor& weight, float eps, Tensor& xn,
                            const Tensor* const* w, int count, Tensor* const* out, int64_t n) override;
  void rope_store_kv(int layer, Tensor& q, Tensor& k, const Tensor& v, int n_heads, int n_kv_heads,
                     const RopeConfig& rope) override;
  // The gemma/phi3 ops (backend_cuda_window_softcap.cpp).
  void apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer) override;
  void attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads, int head_dim,
                     float scale, const AttentionExtras& extras) override;
  void scale(Tensor& x, float s, int64_t n) override;
  void gelu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) override;
  void softcap(Tensor& x, float cap, int64_t n) override;
  // Encoder ops (backend_cuda_encoder.cpp): kernels/cuda/encoder.cu.
  void write(Tensor& x, const float* host, int64_t n) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, Tensor& out,
                  int64_t n) override;
  void encoder_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const std::vector<int64_t>& starts, int n_heads, int head_dim) override;
  // Groups the tokens by expert on the host (cpu::moe_group), uploads the indices, gathers the
  // rows, runs one matmul per active expert and matrix (quantized experts: the quantized
  // kernels, as matmul), combines (moe_combine.cu).
  void moe_ffn(const ExpertWeights& w, const Tensor& x, const int32_t* experts, const float* weights,
               int k, const Tensor* shared, const float* shared_weights, Tensor& out, int64_t n) override;
  // Quantized mode, up to kMoeRouteMaxTokens rows, expert types the int8 GEMV takes: routing,
  // grouping and the grouped GEMVs' counts stay on the device (backend_cuda_moe.cpp).
  bool moe_routes_on_device(const ExpertWeights& w, int64_t n) const override;
  void moe_ffn_routed(const ExpertWeights& w, const Tensor& x, const Tensor& logits, int k, bool normalize,
                      const Tensor* shared, Tensor& out, int64_t n) override;

  // LoRA (backend_cuda_lora.cpp): kernels/cuda/lora.cu over each adapter's gathered rows.
  bool supports_lora() const override { return true; }
  void lora_add(const LoraRows& group, const Tensor& x, Tensor& out) override;

  void read_kv_block(int layer, int block, float* k_out, float* v_out) override;
  void write_kv_block(int layer, int block, const float* k, const float* v) override;
  size_t kv_block_raw_bytes() const override;
  void read_kv_block_raw(int block, void* out) override;
  void write_kv_block_raw(int block, const void* in) override;
  void read(const Tensor& x, int64_t rows, float* host) override;

  // Sampling on the GPU (kernels/cuda/sample.cu): begin_sampling uploads every draw's params,
  // row, token mask and edits in one transfer, sample() enqueues the edit and draw kernels per
  // LM-head chunk writing ids (and logprobs) into a device buffer, finish_sampling copies them
  // back: the step's only host wait. Logits are
  // read in chunks of 256 rows (one bigger GEMM; 256 x vocab floats of scratch).
  bool can_sample() const override { return true; }
  int logits_chunk_rows() const override { return 256; }
  void begin_sampling(const std::vector<SampleRequest>& draws) override;
  void sample(const Tensor& logits, int64_t row_base, int64_t first_draw, int64_t n_draws) override;
  void finish_sampling(int32_t* ids, DrawLogprobs* logprobs) override;
  // The bf16 and int8 GEMVs with the argmax as their epilogue (kernels/cuda/gemv.cu,
  // gemv_dp4a.cu, argmax_pick.cu) for up to kGemvMaxRows / kQuantGemvMaxRows rows; larger
  // chunks (cuBLAS, the tensor-core GEMM) and the f32-activation GEMV keep matmul + sample.
  bool sample_greedy_matmul(const Tensor& w, const Tensor& x, int64_t rows, int64_t row_base, int64_t first_draw,
                            int64_t n_draws) override;

  // Decode-step graphs (when CudaBackendOptions::cuda_graphs): see Backend::replay_recorded.
  bool replay_recorded() override;
  void end_recordable() override;
  // With graphs on, decode steps run in buckets of 1, 2, 4, ..., kGraphBucketMax rows (larger
  // steps: their own size), so a handful of graphs serve every batch size up to the largest.
  int64_t recorded_rows(int64_t n) const override;
  // CUDA-only: graph captures and replays so far (all zero with graphs off).
  CudaGraphStats graph_stats() const;

 private:
  void matmul_f32(const Tensor& w, const Tensor& x, Tensor& out, int64_t n);  // F32 weights
  // Quantized weights kept in their GGUF bits (backend_cuda_quant.cpp).
  Tensor upload_quantized(const void* host_data, GgmlType type, int64_t rows, int64_t cols);
  void matmul_quant(const Tensor& w, const Tensor& x, Tensor& out, int64_t n);
  void matmul_quant_rest(const Tensor& w, const Tensor& x, Tensor& out, int64_t n);
  // Rows 0..n-1 of x (F32, x.cols % 32 == 0) as int8 blocks in q8_x (q8_acts_layout(n, x.cols)),
  // for gemv_quant_dp4a and its grouped form.
  const void* quantize_acts(const Tensor& x, int64_t n);
  // out = x W^T from x quantized by quantize_acts (n rows): the int8 GEMV for up to
  // kQuantGemvMaxRows rows, with batch_invariant the int8 tensor-core GEMM (gemm_int8_mma.cu,
  // the GEMV's bits for every row) above. False, launching nothing, where neither takes it.
  bool int8_matmul(const Tensor& w, const void* acts, Tensor& out, int64_t n);
  // out = xb W^T for a bf16 W and bf16 activations xb ([n, w.cols]): the bf16 GEMV for a few
  // rows, else cuBLAS.
  void matmul_bf16(const Tensor& w, const void* xb, Tensor& out, int64_t n);
  // out[n, rows] = x[n, cols] W^T through cuBLAS: W bf16 [rows, cols] at w, xb bf16 [n, cols].
  void gemm_bf16(const void* w, int64_t rows, int64_t cols, const void* xb, Tensor& out, int64_t n);
  // The experts' matmuls of a routed step: dst = src W_e^T for each (W, dst) pair, for every
  // expert over its gathered rows, W stacked with `per` rows per expert.
  using MoeMats = std::initializer_list<std::pair<const Tensor*, Tensor*>>;
  using ExpertsMatmul = std::function<void(const Tensor& src, MoeMats mats, int64_t per)>;
  void moe_experts(const ExpertWeights& w, const Tensor& x, const int32_t* token_of_row, const int32_t* place,
                   const float* weights, const float* shared_weights, int k, const Tensor* shared, Tensor& out,
                   int64_t n, const ExpertsMatmul& mats);
  // upload_weight of everything but F32 matrices: a bf16 matrix, or an F32 vector.
  Tensor upload_converted(const void* host_data, GgmlType type, int64_t rows, int64_t cols);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

#else  // built without CUDA: the same entry points, reporting that CUDA is absent

inline bool cuda_available(std::string* why) {
  if (why) *why = "pagoda was built without CUDA (PAGODA_CUDA=OFF)";
  return false;
}

inline std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& = {}) {
  throw std::runtime_error("pagoda was built without CUDA (PAGODA_CUDA=OFF)");
}

#endif

}  // namespace pagoda
