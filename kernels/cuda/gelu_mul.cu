// GeGLU gate (gemma): out = gelu_tanh(gate) * up elementwise, gelu_tanh(g) = 0.5 g (1 +
// tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// Launch and assumptions: gated_mul.cuh's (1-D grid-stride loop, 256 threads per block, grid
// capped at 65535 blocks; n x cols contiguous F32; out may alias gate or up).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/gated_mul.cuh"

namespace pagoda::cuda {
namespace {

struct GeluTanh {
  __device__ __forceinline__ static float of(float g) {
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  }
};

}  // namespace

void gelu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols, void* stream) {
  launch_gated_mul<GeluTanh>(gate, up, out, n, cols, stream);
}

}  // namespace pagoda::cuda
