// SwiGLU gate: out = silu(gate) * up elementwise, silu(g) = g / (1 + exp(-g)).
// Launch and assumptions: gated_mul.cuh's (1-D grid-stride loop, 256 threads per block, grid
// capped at 65535 blocks; n x cols contiguous F32; out may alias gate or up).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/gated_mul.cuh"

namespace pagoda::cuda {
namespace {

struct Silu {
  __device__ __forceinline__ static float of(float g) { return g / (1.0f + expf(-g)); }
};

}  // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols, void* stream) {
  launch_gated_mul<Silu>(gate, up, out, n, cols, stream);
}

}  // namespace pagoda::cuda
