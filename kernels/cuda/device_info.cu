// Device discovery: how many CUDA devices are usable, why not when none is, and how much
// memory the current device has free. Compiled in every CUDA build so the toolchain is
// exercised even on machines without a GPU. No kernels.
#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

bool device_usable(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("CUDA unavailable: ") + cudaGetErrorString(err);
    return false;
  }
  if (n == 0) {
    if (why) *why = "CUDA unavailable: no CUDA device found";
    return false;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("CUDA device 0 unusable: ") + cudaGetErrorString(err);
    return false;
  }
  if (prop.major < 8) {
    if (why)
      *why = std::string("CUDA device 0 (") + prop.name + ") has compute capability " +
             std::to_string(prop.major) + "." + std::to_string(prop.minor) +
             "; pagoda is built for sm_80 and sm_90";
    return false;
  }
  return true;
}

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  size_t f = 0, t = 0;
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
}

}  // namespace pagoda::cuda
