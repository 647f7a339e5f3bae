// Device discovery: how many CUDA devices are usable. Compiled in every CUDA build so the
// toolchain is exercised even on machines without a GPU.
#include <cuda_runtime.h>

#include "kernels/cuda/ops.h"

namespace pagoda::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace pagoda::cuda
