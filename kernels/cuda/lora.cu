// LoRA update of gathered rows: y[r, :] += B (scale * A x[r, :]) for each r in rows (one
// adapter's rows of a step, Punica / S-LoRA's grouping; see kernels/cuda/lora.h).
// Launch: grid (n_rows), 128 threads per row, rank floats of dynamic shared memory for t.
// Phase 1: warp w computes t[k] for k = w, w + 4, ... (lanes stride over `in`, a fixed
// butterfly reduction); phase 2: thread j adds sum_k B[j, k] t[k] to y[r, j] for j = tid,
// tid + 128, ... (k in order). A row's result depends on that row only (batch invariance); it
// matches the CPU reference within float rounding, not bit for bit (other summation orders).
// Assumptions: F32 everything, rank <= kLoraMaxRank, rows within x and y, distinct rows.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/lora.h"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void lora_add_kernel(const float* a, const float* b, int rank, int64_t in, int64_t out, float scale,
                                const float* x, float* y, const int32_t* rows) {
  extern __shared__ float smem[];
  const int64_t r = rows[blockIdx.x];
  const float* xr = x + r * in;
  float* yr = y + r * out;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int k = warp; k < rank; k += n_warps) {
    const float* ak = a + (int64_t)k * in;
    float s = 0.0f;
    for (int64_t i = lane; i < in; i += 32) s += ak[i] * xr[i];
    s = warp_sum(s);
    if (lane == 0) smem[k] = s * scale;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < out; j += blockDim.x) {
    const float* bj = b + j * rank;
    float s = 0.0f;
    for (int k = 0; k < rank; ++k) s += bj[k] * smem[k];
    yr[j] += s;
  }
}

}  // namespace

void lora_add(const float* a, const float* b, int rank, int64_t in, int64_t out, float scale, const float* x,
              float* y, const int32_t* rows, int64_t n_rows, void* stream) {
  if (n_rows <= 0) return;
  if (rank <= 0 || rank > kLoraMaxRank) throw CudaError("lora_add: rank " + std::to_string(rank) + " out of range");
  lora_add_kernel<<<static_cast<unsigned>(n_rows), kThreads, static_cast<size_t>(rank) * sizeof(float),
                    as_stream(stream)>>>(a, b, rank, in, out, scale, x, y, rows);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
