// The compute backend for a `--device` flag, shared by `pagoda serve` and `pagoda generate`.
#pragma once

#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace pagoda {

struct BackendChoice {
  std::string device = "auto";  // cpu | cuda | auto (CUDA when a usable device is present)
  int threads = 0;              // CPU backend threads; 0 = one per hardware thread
  bool cuda_graphs = true;      // CUDA: replay decode steps as CUDA graphs (CudaBackendOptions)
  std::string cpu_decode_pack = "auto";  // CPU: decode-layout copies of the quantized matrices (DecodePack)
  std::string cuda_weights = "quantized";  // CUDA: quantized | bf16 (CudaBackendOptions::weights)
  std::string cuda_quant_gemm = "mma";     // CUDA: mma | cublas (CudaBackendOptions::quant_gemm)
  std::string cuda_prefill_attention = "mma";  // CUDA: mma | exact (CudaBackendOptions::prefill_attention)
  bool cuda_batch_invariant = false;  // CUDA: CudaBackendOptions::batch_invariant
};

struct BackendSelection {
  std::unique_ptr<Backend> backend;
  std::string description;      // e.g. "cpu (8 threads)" or "cuda"
  std::string fallback_reason;  // "auto" chose the CPU: why CUDA was not usable (for the log)
};

// Builds the backend `choice` names. Throws std::invalid_argument for an unknown device name,
// and the CUDA backend's error (with its reason: no driver, no device, built without CUDA) when
// "cuda" is asked for but cannot start. "auto" never fails over CUDA: it falls back to the CPU.
BackendSelection select_backend(const BackendChoice& choice);

}  // namespace pagoda
