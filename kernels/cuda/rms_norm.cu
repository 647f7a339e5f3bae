// RMSNorm: out[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * w[:], for i < n, and its fused
// form rms_norm_fused, which may first add a residual (x[i, :] += y[i, :], written back to x:
// the add that closes a sub-block) and may also emit the normed row in the forms the next
// matmuls read: bf16 (the bf16 GEMV / cuBLAS input) and int8 blocks of 32 (the dp4a GEMV's
// q8_acts_layout), so no separate add, conversion or quantization launch reads the row again.
// Launch: grid (n), 256 threads per row; the sum of squares is a fixed-order block reduction,
// so a row's result never depends on the other rows (batch invariance). Each thread keeps four
// loads in flight: with one, a 4,096-wide row took 15.8 us on an H100 (a chain of dependent
// global loads per thread), twice per layer in a one-token step. Thread t handles columns
// t + 256 j, so warp w's 32 lanes hold the consecutive columns 256 j + 32 w + 0..31 at once:
// one int8 block, quantized with warp shuffles exactly as quantize_acts_q8 does (the same device code,
// quant_acts.cuh, on the same value), and the bf16 form is __float2bfloat16_rn of the same value as
// convert_to_bf16: the fused outputs equal the separate launches' bit for bit.
// Assumptions: F32 rows of `cols` floats; w is F32 [cols]; out may alias x or y (a thread reads
// a column before it writes it, and only its own columns); the int8 form needs cols % 32 == 0.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quant_acts.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm_kernel(float* x, const float* y, const float* w, float eps, float* out, int64_t cols,
                                Q8ActsOut q8, __nv_bfloat16* xb) {
  __shared__ float scratch[32];
  float* row = x + (int64_t)blockIdx.x * cols;
  const float* yrow = y ? y + (int64_t)blockIdx.x * cols : nullptr;
  float* dst = out + (int64_t)blockIdx.x * cols;
  const int64_t step = blockDim.x;
  float ss = 0.0f;
  int64_t c = threadIdx.x;
  for (; c + 3 * step < cols; c += 4 * step) {
    float a = row[c], b = row[c + step], d = row[c + 2 * step], e = row[c + 3 * step];
    if (yrow) {
      a += yrow[c];
      b += yrow[c + step];
      d += yrow[c + 2 * step];
      e += yrow[c + 3 * step];
      row[c] = a;
      row[c + step] = b;
      row[c + 2 * step] = d;
      row[c + 3 * step] = e;
    }
    ss += a * a + b * b + d * d + e * e;
  }
  for (; c < cols; c += step) {
    float a = row[c];
    if (yrow) {
      a += yrow[c];
      row[c] = a;
    }
    ss += a * a;
  }
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(ss / (float)cols + eps);
  const int lane = threadIdx.x & 31;
  const int64_t row_blocks = (int64_t)blockIdx.x * (cols / 32);
  // One output column: the f32 value and, when asked, its bf16 and int8 forms.
  const auto emit = [&](int64_t col, float v) {
    dst[col] = v;
    if (xb) xb[(int64_t)blockIdx.x * cols + col] = __float2bfloat16_rn(v);
    if (q8.q) quantize_block_lane(q8, row_blocks + col / 32, lane, v);
  };
  // Loads before stores by hand: out may alias x, so the compiler could not reorder them.
  c = threadIdx.x;
  for (; c + 3 * step < cols; c += 4 * step) {
    float v[4], g[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      v[u] = row[c + u * step];
      g[u] = w[c + u * step];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) emit(c + u * step, v[u] * scale * g[u]);
  }
  for (; c < cols; c += step) emit(c, row[c] * scale * w[c]);
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, float* out, int64_t n, int64_t cols,
              void* stream) {
  // The fused kernel with nothing fused: x is only read when there is no residual.
  rms_norm_fused(const_cast<float*>(x), nullptr, w, eps, out, nullptr, nullptr, n, cols, stream);
}

void rms_norm_fused(float* x, const float* residual, const float* w, float eps, float* out, void* q8_acts,
                    void* bf16_out, int64_t n, int64_t cols, void* stream) {
  if (n <= 0) return;
  if (q8_acts && cols % 32 != 0) throw CudaError("rms_norm_fused: the int8 form needs cols % 32 == 0");
  Q8ActsOut q8;
  if (q8_acts) {
    const Q8ActsLayout L = q8_acts_layout(n, cols);
    auto* base = static_cast<uint8_t*>(q8_acts);
    q8.q = reinterpret_cast<int8_t*>(base + L.q_offset);
    q8.d = reinterpret_cast<float*>(base + L.d_offset);
    q8.qsum = reinterpret_cast<int*>(base + L.sum_offset);
  }
  rms_norm_kernel<<<static_cast<unsigned>(n), kThreads, 0, as_stream(stream)>>>(
      x, residual, w, eps, out, cols, q8, static_cast<__nv_bfloat16*>(bf16_out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
