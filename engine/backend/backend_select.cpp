#include "engine/backend/backend_select.h"

#include <stdexcept>

#include "engine/backend/cpu/backend_cpu.h"
#include "engine/backend/cuda/backend_cuda.h"

namespace pagoda {

BackendSelection select_backend(const BackendChoice& choice) {
  if (choice.device != "cpu" && choice.device != "cuda" && choice.device != "auto")
    throw std::invalid_argument("--device must be cpu, cuda or auto, got '" + choice.device + "'");
  BackendSelection s;
  bool use_cuda = choice.device == "cuda";
  if (choice.device == "auto") use_cuda = cuda_available(&s.fallback_reason);
  if (use_cuda) {
    s.fallback_reason.clear();
    CudaBackendOptions opts;
    opts.cuda_graphs = choice.cuda_graphs;
    opts.weights = parse_cuda_weights(choice.cuda_weights, "--cuda-weights");
    opts.quant_gemm = parse_quant_gemm(choice.cuda_quant_gemm, "--cuda-quant-gemm");
    opts.prefill_attention = parse_prefill_attention(choice.cuda_prefill_attention, "--cuda-prefill-attention");
    opts.batch_invariant = choice.cuda_batch_invariant;
    s.backend = make_cuda_backend(opts);  // throws when built without CUDA or no device
    s.description = s.backend->name() + (choice.cuda_graphs ? " (CUDA graphs)" : "") +
                    (opts.weights == CudaWeights::Bf16 ? " (bf16 weights)" : "") +
                    (opts.weights != CudaWeights::Bf16 && opts.quant_gemm == QuantGemm::DequantCublas
                         ? " (cuBLAS GEMM on dequantized weights)"
                         : "") +
                    (opts.prefill_attention == PrefillAttention::Exact ? " (exact f32 prefill attention)" : "") +
                    (opts.batch_invariant ? " (batch-invariant matmuls)" : "");
    return s;
  }
  auto cpu = std::make_unique<CpuBackend>(choice.threads, parse_decode_pack(choice.cpu_decode_pack, "--cpu-decode-pack"));
  s.description = cpu->name() + " (" + std::to_string(cpu->n_threads()) + " threads)";
  s.backend = std::move(cpu);
  return s;
}

}  // namespace pagoda
