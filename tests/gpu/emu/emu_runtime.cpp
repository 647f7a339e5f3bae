// A fake CUDA runtime and cuBLAS for running the CUDA backend on a CPU (see emu.h): one
// "device" whose memory is host memory, every call synchronous (except while capturing a graph,
// when work is recorded for cudaGraphLaunch), cublasGemmEx as a plain loop
// (only the bf16 x bf16 -> f32, A transposed, case the backend uses). Linked instead of cudart
// and cuBLAS by scripts/gpu-check.sh emu. cudaMalloc fills memory with 0xAB so that reads of
// memory nobody wrote show up as garbage rather than as lucky zeros.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include "emu.h"

namespace emu {
thread_local dim3 t_threadIdx, t_blockIdx;
dim3 g_blockDim, g_gridDim;
std::vector<float> g_smem;
std::mutex g_atomic_mu;
thread_local std::vector<std::function<void()>>* t_capture = nullptr;
std::map<const void*, int>& smem_opt_in() {
  static std::map<const void*, int> m;
  return m;
}

// A captured graph and its instantiation are both the list of recorded work.
using Recording = std::vector<std::function<void()>>;
// Runs `work` now, or records it when this thread is capturing.
cudaError_t enqueue(std::function<void()> work) {
  if (t_capture) t_capture->push_back(std::move(work));
  else work();
  return cudaSuccess;
}
}  // namespace emu

// Refused during a capture, as by the real runtime.
#define EMU_NOT_WHILE_CAPTURING() \
  do {                             \
    if (emu::t_capture) return cudaErrorStreamCaptureUnsupported; \
  } while (0)

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
cudaError_t cudaStreamSynchronize(cudaStream_t) { EMU_NOT_WHILE_CAPTURING(); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { EMU_NOT_WHILE_CAPTURING(); return cudaSuccess; }
// An event is the host time at which the work queued before it finished (work runs
// synchronously, so that is when cudaEventRecord's turn comes), in milliseconds.
static double host_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = reinterpret_cast<cudaEvent_t>(new double(0)); return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  double* t = reinterpret_cast<double*>(e);
  return emu::enqueue([t] { *t = host_ms(); });
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { EMU_NOT_WHILE_CAPTURING(); return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  EMU_NOT_WHILE_CAPTURING();
  *ms = static_cast<float>(*reinterpret_cast<double*>(end) - *reinterpret_cast<double*>(start));
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete reinterpret_cast<double*>(e); return cudaSuccess; }
cudaError_t cudaMalloc(void** p, size_t n) { EMU_NOT_WHILE_CAPTURING(); *p = std::aligned_alloc(256, (n + 255) / 256 * 256); std::memset(*p, 0xAB, n); return cudaSuccess; }
cudaError_t cudaFree(void* p) { EMU_NOT_WHILE_CAPTURING(); std::free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { EMU_NOT_WHILE_CAPTURING(); std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { EMU_NOT_WHILE_CAPTURING(); std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { return emu::enqueue([=] { std::memcpy(d, s, n); }); }
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t) { return emu::enqueue([=] { std::memset(d, v, n); }); }
cudaError_t cudaMemset(void* d, int v, size_t n) { EMU_NOT_WHILE_CAPTURING(); std::memset(d, v, n); return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  if (emu::t_capture) return cudaErrorIllegalState;
  emu::t_capture = new emu::Recording;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) {
  if (!emu::t_capture) return cudaErrorIllegalState;
  *g = reinterpret_cast<cudaGraph_t>(emu::t_capture);
  emu::t_capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* st) {
  *st = emu::t_capture ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  *e = reinterpret_cast<cudaGraphExec_t>(new emu::Recording(*reinterpret_cast<emu::Recording*>(g)));
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
  EMU_NOT_WHILE_CAPTURING();  // (the real runtime would add it as a child graph)
  for (auto& work : *reinterpret_cast<emu::Recording*>(e)) work();
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete reinterpret_cast<emu::Recording*>(g); return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete reinterpret_cast<emu::Recording*>(e); return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) { *h = reinterpret_cast<cublasHandle_t>(new int(3)); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { delete reinterpret_cast<int*>(h); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t) { return "emulated cublas error"; }
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                            cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                            cublasComputeType_t, cublasGemmAlgo_t) {
  const bool f32 = at == CUDA_R_32F && bt == CUDA_R_32F;  // F32 weights (MoE routers)
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || !(f32 || (at == CUDA_R_16BF && bt == CUDA_R_16BF)) ||
      ct != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // alpha and beta are read now (host pointer mode), the matrices when the work runs.
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  if (f32) {
    auto* Af = static_cast<const float*>(A);
    auto* Bf = static_cast<const float*>(B);
    auto* Cf = static_cast<float*>(C);
    emu::enqueue([=] {
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < m; ++i) {
          float s = 0;
          for (int p = 0; p < k; ++p) s += Af[p + (size_t)i * lda] * Bf[p + (size_t)j * ldb];
          float& c = Cf[i + (size_t)j * ldc];
          c = a * s + (b != 0 ? b * c : 0.0f);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  auto* Ab = static_cast<const __nv_bfloat16*>(A);
  auto* Bb = static_cast<const __nv_bfloat16*>(B);
  auto* Cf = static_cast<float*>(C);
  emu::enqueue([=] {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float s = 0;
        for (int p = 0; p < k; ++p) s += __bfloat162float(Ab[p + (size_t)i * lda]) * __bfloat162float(Bb[p + (size_t)j * ldb]);
        float& c = Cf[i + (size_t)j * ldc];
        c = a * s + (b != 0 ? b * c : 0.0f);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
}
