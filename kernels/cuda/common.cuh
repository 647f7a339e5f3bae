// Shared helpers for the CUDA kernels and the CUDA backend: error checking that reports the
// failing expression with file and line (as an exception, never exit()), stream casts, and a
// few device-side reductions. Host-only parts compile with a plain C++ compiler too, so the
// CUDA backend's host files (engine/backend/cuda) can include this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pagoda::cuda {

// The exception every CUDA failure becomes; the message names the call, file and line.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file,
                                          int line) {
  throw CudaError(std::string("CUDA error '") + cudaGetErrorString(err) + "' in " + expr +
                  " at " + file + ":" + std::to_string(line));
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for a 1-D grid-stride loop over n elements: enough blocks to fill the device,
// capped so the grid stays within limits whatever n is.
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = ceil_div(n, threads);
  if (blocks < 1) blocks = 1;
  if (blocks > 65535) blocks = 65535;
  return static_cast<unsigned>(blocks);
}

}  // namespace pagoda::cuda

// Checks a CUDA runtime call; throws pagoda::cuda::CudaError with file:line on failure.
#define CUDA_CHECK(expr)                                                           \
  do {                                                                             \
    cudaError_t pagoda_err_ = (expr);                                              \
    if (pagoda_err_ != cudaSuccess)                                                \
      ::pagoda::cuda::throw_cuda_error(pagoda_err_, #expr, __FILE__, __LINE__);    \
  } while (0)

// Checks the most recent kernel launch (bad configuration, missing kernel image, ...).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pagoda::cuda {

// Sum over the 32 lanes of a warp; every lane gets the result. Fixed butterfly order, so the
// result is the same on every run.
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Sum over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` must hold 32 floats. Deterministic: fixed reduction tree.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Reads element i of a table of `type` (F32, F16 or BF16 given as the GGML id) as float.
__device__ __forceinline__ float load_as_float(const void* base, int type_id, int64_t i) {
  if (type_id == 1) return __half2float(static_cast<const __half*>(base)[i]);
  if (type_id == 30) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

}  // namespace pagoda::cuda
#endif
