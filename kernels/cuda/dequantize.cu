// Dequantization of GGML block formats to bf16 (weights are dequantized once, at load time):
//   Q8_0: 32 values, {f16 d; i8 qs[32]}               y = d * q
//   Q4_0: 32 values, {f16 d; u8 qs[16]}               y[j] = d * (lo4 - 8), y[j+16] = d * (hi4 - 8)
//   Q4_K: 256 values, {f16 d, dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32 with 6-bit
//         scale/min pairs; y = d*sc * q - dmin*m
//   Q6_K: 256 values, {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 16 sub-blocks of 16,
//         6-bit quants (4 low bits in ql, 2 high in qh) minus 32; y = d * scale * q
// Layouts and element order follow ggml (kernels/cpu/quants.h holds the CPU reference). Products
// are computed with explicit rounding intrinsics (no FMA contraction) in the reference's order,
// then rounded to bf16 (nearest even).
// Launch: one thread per block of 32 values (Q8_0/Q4_0) or per sub-block of 32 values
// (Q4_K/Q6_K: 8 threads per 256-value block); 256 threads per CUDA block, grid-stride.
// Assumptions: n is a multiple of the type's block size; src is 2-byte aligned.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pagoda::cuda {
namespace {

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));  // p is 2-byte aligned
}

__device__ __forceinline__ void put(__nv_bfloat16* y, int64_t i, float v) {
  y[i] = __float2bfloat16_rn(v);
}

__global__ void dequant_q8_0(const uint8_t* src, int64_t n_blocks, __nv_bfloat16* y) {
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < n_blocks;
       b += (int64_t)gridDim.x * blockDim.x) {
    const uint8_t* blk = src + b * 34;
    const float d = f16_at(blk);
    const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
    for (int j = 0; j < 32; ++j) put(y, b * 32 + j, __fmul_rn(d, (float)qs[j]));
  }
}

__global__ void dequant_q4_0(const uint8_t* src, int64_t n_blocks, __nv_bfloat16* y) {
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < n_blocks;
       b += (int64_t)gridDim.x * blockDim.x) {
    const uint8_t* blk = src + b * 18;
    const float d = f16_at(blk);
    const uint8_t* qs = blk + 2;
    for (int j = 0; j < 16; ++j) {
      put(y, b * 32 + j, __fmul_rn(d, (float)((int)(qs[j] & 0x0F) - 8)));
      put(y, b * 32 + j + 16, __fmul_rn(d, (float)((int)(qs[j] >> 4) - 8)));
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K block, as ggml packs them.
__device__ __forceinline__ void q4k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// One thread per sub-block of 32 values: sub-block s (0..7) of block b.
__global__ void dequant_q4_k(const uint8_t* src, int64_t n_sub, __nv_bfloat16* y) {
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n_sub;
       g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = g / 8;
    const int s = (int)(g % 8);
    const uint8_t* blk = src + b * 144;
    const float d = f16_at(blk), dmin = f16_at(blk + 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qs = blk + 16 + (s / 2) * 32;  // 32 bytes hold two sub-blocks (lo/hi nibbles)
    int sc, m;
    q4k_scale_min(s, scales, &sc, &m);
    const float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)m);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int q = (qs[l] >> shift) & 0x0F;
      put(y, b * 256 + s * 32 + l, __fsub_rn(__fmul_rn(dl, (float)q), ml));
    }
  }
}

// One thread per group of 32 outputs: group s (0..7) of block b. ggml walks a Q6_K block in two
// halves of 128; within a half, output l + 32*r (r = 0..3) takes its low bits from
// ql[l + 32*(r&1)] (low nibble for r < 2, high for r >= 2) and its high bits from qh[l] >> 2r.
__global__ void dequant_q6_k(const uint8_t* src, int64_t n_sub, __nv_bfloat16* y) {
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n_sub;
       g += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = g / 8;
    const int s = (int)(g % 8);
    const uint8_t* blk = src + b * 210;
    const int half = s / 4, r = s % 4;
    const uint8_t* ql = blk + half * 64;
    const uint8_t* qh = blk + 128 + half * 32;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + half * 8;
    const float d = f16_at(blk + 208);
    for (int l = 0; l < 32; ++l) {
      const uint8_t lowbyte = ql[l + 32 * (r & 1)];
      const int lo = r < 2 ? (lowbyte & 0x0F) : (lowbyte >> 4);
      const int q = (lo | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
      const int is = l / 16 + 2 * r;
      put(y, b * 256 + half * 128 + r * 32 + l, __fmul_rn(__fmul_rn(d, (float)sc[is]), (float)q));
    }
  }
}

}  // namespace

void dequantize_to_bf16(const void* src, GgmlType src_type, int64_t n, void* dst, void* stream) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* y = static_cast<__nv_bfloat16*>(dst);
  cudaStream_t st = as_stream(stream);
  if (n <= 0) return;
  switch (src_type) {
    case GgmlType::Q8_0:
      if (n % 32) throw CudaError("dequantize: Q8_0 size not a multiple of 32");
      dequant_q8_0<<<grid_for(n / 32, 256), 256, 0, st>>>(s, n / 32, y);
      break;
    case GgmlType::Q4_0:
      if (n % 32) throw CudaError("dequantize: Q4_0 size not a multiple of 32");
      dequant_q4_0<<<grid_for(n / 32, 256), 256, 0, st>>>(s, n / 32, y);
      break;
    case GgmlType::Q4_K:
      if (n % 256) throw CudaError("dequantize: Q4_K size not a multiple of 256");
      dequant_q4_k<<<grid_for(n / 32, 256), 256, 0, st>>>(s, n / 32, y);
      break;
    case GgmlType::Q6_K:
      if (n % 256) throw CudaError("dequantize: Q6_K size not a multiple of 256");
      dequant_q6_k<<<grid_for(n / 32, 256), 256, 0, st>>>(s, n / 32, y);
      break;
    default:
      throw CudaError(std::string("dequantize: unsupported type ") +
                      ggml_type_info(src_type).name);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda::cuda
