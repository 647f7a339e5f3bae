// The row ops of encoder models (bert), against the CPU reference kernels/cpu/encoder_ops.h.
//
// layer_norm: out[i, :] = (x[i, :] - mean) * rsqrt(var + eps) * g + b, for i < n.
//   Launch: grid (n), 256 threads per row; mean, then the variance around it, each a
//   fixed-order block reduction (float; the CPU sums in double), so a row's result never
//   depends on the other rows; 1 / sqrtf as rms_norm.cu. out may alias x (each thread reads its elements before writing).
//
// encoder_attention: every row attends to all rows of its own input, per head:
//   out[r, h] = softmax_j(q[r, h] . k[j, h] * scale) v[j, h] over j in r's input.
//   Launch: grid (n rows, n_heads), 128 threads; input b owns rows starts[b] .. starts[b+1]-1
//   (device int32, n_inputs + 1 entries, rising from 0); the block finds its input by binary
//   search. Dynamic shared memory: the scores of the longest input (max_len floats). Scores
//   by key index (thread j strides), max and sum as block reductions, then each thread owns
//   output dimensions and sums p_j v[j] in key order: a row's result is the same whatever its
//   batch (the row's own input alone decides the arithmetic).
// Assumptions: F32 rows; q, k, v, out hold n_heads * head_dim columns; out does not alias them.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kAttnThreads = 128;

__global__ void layer_norm_kernel(const float* x, const float* g, const float* b, float eps, float* out,
                                  int64_t cols) {
  __shared__ float scratch[32];
  const float* row = x + (int64_t)blockIdx.x * cols;
  float* dst = out + (int64_t)blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += row[c];
  const float mean = block_sum(sum, scratch) / (float)cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += (row[c] - mean) * (row[c] - mean);
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / (float)cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = (row[c] - mean) * inv * g[c] + b[c];
}

__global__ void encoder_attention_kernel(const float* q, const float* k, const float* v, float* out,
                                         const int32_t* starts, int n_inputs, int n_heads, int head_dim,
                                         float scale) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const int row = blockIdx.x, h = blockIdx.y;
  int lo = 0, hi = n_inputs - 1;  // the input b with starts[b] <= row < starts[b + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  const int r0 = starts[lo], len = starts[lo + 1] - r0;
  const int64_t d = (int64_t)n_heads * head_dim;
  const float* qr = q + row * d + (int64_t)h * head_dim;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    const float* kj = k + (int64_t)(r0 + j) * d + (int64_t)h * head_dim;
    float dot = 0.0f;
    for (int u = 0; u < head_dim; ++u) dot += qr[u] * kj[u];
    smem[j] = dot * scale;
    mx = fmaxf(mx, smem[j]);
  }
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    smem[j] = expf(smem[j] - mx);
    sum += smem[j];
  }
  const float inv = 1.0f / block_sum(sum, scratch);  // its barriers publish every smem[j]
  for (int u = threadIdx.x; u < head_dim; u += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < len; ++j) acc += smem[j] * v[(int64_t)(r0 + j) * d + (int64_t)h * head_dim + u];
    out[row * d + (int64_t)h * head_dim + u] = acc * inv;
  }
}

}  // namespace

void layer_norm(const float* x, const float* g, const float* b, float eps, float* out, int64_t n, int64_t cols,
                void* stream) {
  if (n <= 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(n), kNormThreads, 0, as_stream(stream)>>>(x, g, b, eps, out, cols);
  CUDA_CHECK_LAUNCH();
}

void encoder_attention(const float* q, const float* k, const float* v, float* out, const int32_t* starts,
                       int n_inputs, int64_t n_rows, int max_len, int n_heads, int head_dim, void* stream) {
  if (n_rows <= 0 || n_inputs <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(n_heads));
  const size_t smem = static_cast<size_t>(max_len) * sizeof(float);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  encoder_attention_kernel<<<grid, kAttnThreads, smem, as_stream(stream)>>>(q, k, v, out, starts, n_inputs,
                                                                            n_heads, head_dim, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
