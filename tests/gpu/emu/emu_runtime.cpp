// A fake CUDA runtime and cuBLAS for running the CUDA backend on a CPU (see emu.h): one
// "device" whose memory is host memory, every call synchronous, cublasGemmEx as a plain loop
// (only the bf16 x bf16 -> f32, A transposed, case the backend uses). Linked instead of cudart
// and cuBLAS by scripts/gpu-check.sh emu. cudaMalloc fills memory with 0xAB so that reads of
// memory nobody wrote show up as garbage rather than as lucky zeros.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include "emu.h"

namespace emu {
thread_local dim3 t_threadIdx, t_blockIdx;
dim3 g_blockDim, g_gridDim;
std::vector<float> g_smem;
BlockSync g_sync;
std::mutex g_atomic_mu;
}

extern "C" {
cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "emulated");
  p->major = 9; p->minor = 0; p->totalGlobalMem = size_t(8) << 30;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = size_t(6) << 30; *t = size_t(8) << 30; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = reinterpret_cast<cudaStream_t>(new int(1)); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete reinterpret_cast<int*>(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = reinterpret_cast<cudaEvent_t>(new int(2)); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete reinterpret_cast<int*>(e); return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) { *p = std::aligned_alloc(256, (n + 255) / 256 * 256); std::memset(*p, 0xAB, n); return cudaSuccess; }
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { std::memset(d, v, n); return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = reinterpret_cast<cublasHandle_t>(new int(3)); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { delete reinterpret_cast<int*>(h); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "emulated cublas error"; }
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t, cublasGemmAlgo_t) {
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  auto* Ab = static_cast<const __nv_bfloat16*>(A);
  auto* Bb = static_cast<const __nv_bfloat16*>(B);
  auto* Cf = static_cast<float*>(C);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float s = 0;
      for (int p = 0; p < k; ++p) s += __bfloat162float(Ab[p + (size_t)i * lda]) * __bfloat162float(Bb[p + (size_t)j * ldb]);
      float& c = Cf[i + (size_t)j * ldc];
      c = a * s + (b != 0 ? b * c : 0.0f);
    }
  return CUBLAS_STATUS_SUCCESS;
}
}
