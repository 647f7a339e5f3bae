// Matrix multiplication against GGML-typed weights: the heart of the CPU forward pass.
//
//   out[i][o] = sum_k w[o][k] * x[i][k]      for i < n, o < out_features, k < in_features
//
// w is row-major [out_features][in_features] in its GGML type (rows as stored in GGUF);
// x and out are row-major F32 ([n][in_features] and [n][out_features]).
//
// Numerics and batch invariance: the result for row i never depends on n, on the other rows,
// on the thread count or on how work is split, because work is only ever split over outputs
// (never over the k reduction) and every (row, output) pair runs the same arithmetic:
//   * Quantized weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
//     IQ4_XS): each x row is quantized once per call to int8 blocks of 32 (scale amax/127, see
//     quantize_activations) and the products are summed exactly in integers per block; the
//     pair's float accumulator then takes one fused multiply-add per block (one more for an
//     affine type's min, one per 16-element half for Q6_K/Q3_K/Q2_K, plus Q2_K's two mins), in
//     block order (matmul_internal.h). Because the integer sums are exact, every ISA level gives
//     bit-identical results for these types, the AMX tiles included: TDPBSUD sums the same
//     integers per 32-element block (per 16-element half for Q2_K, Q3_K, Q6_K) and the float
//     epilogue is the AVX-512 prefill's, operation for operation (matmul_amx_kernel.h).
//   * BF16 weights with bf16_dot_products() on: x rounded to bf16 once per row, then vdpbf16ps
//     (exact bf16 products summed in f32) in a fixed order (matmul_bf16_avx512.cpp). F16 weights
//     always keep the f32 kernel: rounding them to bf16 would drop 3 of their 10 mantissa bits.
//   * F32, F16, BF16 weights otherwise: a float dot product with a fixed per-ISA order (a 16- or 8-lane
//     fused multiply-add chain over k, then a fixed horizontal sum). Results are identical for
//     any n and split at a given ISA level, and differ between levels only by rounding.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_type.h"

namespace pagoda::cpu {

struct PackedWeight;
enum class DecodeLayout : uint8_t;

// True when matmul handles weights of type t: F32, F16, BF16 and the quantized types above.
bool matmul_supports(GgmlType t);

// out = x * w^T as above with the default ISA level (default_cpu_isa()), spread over `pool`
// (outputs are split between its threads; the calling thread takes part).
// in_features must be a multiple of the type's block size (32 or 256 for quantized types); out
// must not overlap x or w. Throws std::invalid_argument for an unsupported type or a bad shape.
//
// Performance shape: with n <= 16 (decode) quantized weights are streamed once straight from
// their GGML blocks (or from a decode layout, see the PackedWeight overloads below); with more rows each thread decodes 32 outputs x 512 inputs of weights at a
// time into an interleaved tile that every activation row reuses (prefill is compute-bound). At
// the Amx level that tile is the B operand of AMX-INT8 tile dot products (16 rows x 32 outputs
// per step, straight from the quantized activations) with the float epilogue on AVX-512;
// PAGODA_CPU_ISA=avx512 turns the tiles off. Their speed is not measured yet (no AMX host).
void matmul(ThreadPool& pool, GgmlType wtype, const void* w, int64_t out_features, int64_t in_features,
            const float* x, int64_t n, float* out);

// BF16 weights through vdpbf16ps (AVX512_BF16, at the Avx512 level) instead of the f32 kernel:
// the activations are rounded to bf16 (relative error 2^-9), as llama.cpp does for BF16 weights.
// Off by default: on stories260K it moves logits by up to 0.13 against the f32 model and changes
// free-running greedy ids, for 4-11% more prefill speed on the one host measured (a Sapphire
// Rapids class VM, where vdpbf16ps sustains about the flops of f32 FMA). PAGODA_BF16_DOT=1 turns
// it on at start; set_bf16_dot_products() at run time (tests, benchmarks). bf16_dot_products()
// is true when it is on and this CPU has AVX512_BF16.
void set_bf16_dot_products(bool on);
bool bf16_dot_products();

// The same at an explicit ISA level (tests and benchmarks); throws std::invalid_argument if this
// CPU cannot run that level.
void matmul(ThreadPool& pool, CpuIsa isa, GgmlType wtype, const void* w, int64_t out_features,
            int64_t in_features, const float* x, int64_t n, float* out);

// Weights packed for decode (weight_pack.h): the level that reads w.layout (AVX2 for Tiles8,
// AVX-512 for Rows16) reads w's packed bytes at any n (prefill tiles are made from them), the
// other ISA levels read w.source; the results are bit-identical to matmul on w.source.
void matmul(ThreadPool& pool, const PackedWeight& w, const float* x, int64_t n, float* out);
void matmul(ThreadPool& pool, CpuIsa isa, const PackedWeight& w, const float* x, int64_t n, float* out);
// out[j] = x * w[j]^T for j < count: matrices of one type and width that read the same x (a
// layer's q/k/v, its gate/up). x is quantized once and all their outputs are split over the
// threads as one job, so a small matrix pays no pool round trip of its own; bit-identical to
// count matmul calls. The packed form needs one type, width and layout (std::invalid_argument
// otherwise).
struct SameXMatrix {
  const void* w;  // GGML layout
  int64_t out_features;
  float* out;
};
void matmul_same_x(ThreadPool& pool, CpuIsa isa, GgmlType wtype, const SameXMatrix* m, int count, int64_t in_features,
                   const float* x, int64_t n);
void matmul_same_x(ThreadPool& pool, CpuIsa isa, const PackedWeight* const* w, float* const* out, int count,
                   const float* x, int64_t n);
// Weights in decode layout `layout` given by their bytes alone: a PackedWeight's, or rows
// [g * R, g * R + out_features) of them with out_features a multiple of R =
// decode_layout_rows(layout) (one expert's slice of stacked experts: a slice of whole groups is a
// packed matrix itself). Runs the level that reads the layout (decode_layout_isa); throws
// std::invalid_argument on a CPU without it.
void matmul_decode_layout(ThreadPool& pool, DecodeLayout layout, GgmlType wtype, const void* w, int64_t out_features,
                          int64_t in_features, const float* x, int64_t n, float* out);

}  // namespace pagoda::cpu
