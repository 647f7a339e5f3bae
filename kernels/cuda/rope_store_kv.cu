// RoPE fused with the KV store: one launch does what rope(q), rope(k) and store_kv(k, v) do for
// a step's fresh rows. Q heads are rotated in place; each K head is rotated in place and, with
// its V head, written to the token's slot in the layer's cache (kv_elem.cuh's element types;
// negative slots are rotated but not stored, as store_kv skips them). The rotation is
// rope_common.cuh's (the same angle in double, the same explicit roundings) and the store
// kv_store_unit, so the results equal the three launches bit for bit.
// Launch: grid (n, q_blocks + n_kv_heads), 128 threads. Block rows y < q_blocks rotate the Q
// pairs as rope.cu does, one pair per thread (a pair's angle is dozens of double-precision
// instructions, so they are spread over many blocks); block row q_blocks + h takes KV head h:
// its threads rotate the head's K pairs, meet at a barrier (which makes the block's global
// writes visible to all its threads), then store the K head's and the V head's storage units.
// Assumptions: n_rot even and <= head_dim <= kMaxHeadDim; q has n_heads heads and k, v
// kv.n_kv_heads heads of kv.head_dim values per row.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/rope_common.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 128;

struct RopeArgs {
  int n_rot;
  float freq_base, freq_scale;
  bool neox;
  const float* freq_factors;
};

// Rotates pair i of the head at `head`, at position pos.
__device__ __forceinline__ void rotate_pair(float* head, int i, double pos, const RopeArgs& r) {
  int a, b;
  rope_pair(i, r.n_rot, r.neox, &a, &b);
  float c, s;
  rope_cos_sin(pos, i, r.n_rot, r.freq_base, r.freq_scale, r.freq_factors, &c, &s);
  rotate(c, s, &head[a], &head[b]);
}

__global__ void rope_store_kv_kernel(float* q, float* k, const float* v, const int32_t* positions,
                                     const int32_t* slots, int n_heads, int q_blocks, RopeArgs r, PagedKv kv) {
  const int t = blockIdx.x, hd = kv.head_dim, half = r.n_rot / 2;
  const double pos = (double)positions[t];
  if ((int)blockIdx.y < q_blocks) {
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j < n_heads * half) rotate_pair(q + ((int64_t)t * n_heads + j / half) * hd, j % half, pos, r);
    return;  // the whole block: no barrier below for it
  }
  const int h = blockIdx.y - q_blocks;
  const int64_t row = (int64_t)t * kv.n_kv_heads + h;  // this head's row in k and v
  float* kh = k + row * hd;
  for (int i = threadIdx.x; i < half; i += blockDim.x) rotate_pair(kh, i, pos, r);
  __syncthreads();  // every rotated value of the head, visible to every thread of the block
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t head_row = (int64_t)slot * kv.n_kv_heads + h;
  const int k_units = kv_units_per_head(kv.k_type, hd), v_units = kv_units_per_head(kv.v_type, hd);
  for (int u = threadIdx.x; u < k_units; u += blockDim.x)
    kv_store_unit(kv_head(kv.k, kv.k_type, head_row, hd), kv.k_type, hd, u, kh);
  for (int u = threadIdx.x; u < v_units; u += blockDim.x)
    kv_store_unit(kv_head(kv.v, kv.v_type, head_row, hd), kv.v_type, hd, u, v + row * hd);
}

}  // namespace

void rope_store_kv(float* q, float* k, const float* v, const int32_t* positions, const int32_t* slots, int64_t n,
                   int n_heads, int n_rot, float freq_base, float freq_scale, bool neox, const float* freq_factors,
                   const PagedKv& kv, void* stream) {
  if (n_rot % 2 != 0 || n_rot > kv.head_dim || n_rot <= 0 || kv.head_dim > kMaxHeadDim)
    throw CudaError("rope_store_kv: n_rot must be even and within head_dim (at most kMaxHeadDim)");
  if (n <= 0) return;
  const int q_blocks = static_cast<int>(ceil_div(int64_t(n_heads) * (n_rot / 2), kThreads));
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(q_blocks + kv.n_kv_heads));
  const RopeArgs r{n_rot, freq_base, freq_scale, neox, freq_factors};
  rope_store_kv_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(q, k, v, positions, slots, n_heads, q_blocks, r, kv);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
