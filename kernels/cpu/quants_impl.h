// Internal to the quants*.cpp files: the per-type row converters behind quantize_row and
// dequantize_row (nb = number of blocks) and the helpers several formats share.
#pragma once

#include <cstdint>

#include "kernels/cpu/quants.h"

namespace pagoda::cpu::detail {

// Affine sub-blocks (Q4_K, Q5_K, Q2_K): nsub sub-blocks of len elements quantized to 0..qmax with
// a per-sub-block scale and min, themselves quantized to 0..levels against dh and mh (fp16).
void quantize_affine_subblocks(const float* x, int nsub, int len, int qmax, int levels, uint16_t& dh, uint16_t& mh,
                               int* sc, int* m, uint8_t* q);

// Index of the IQ4_NL level nearest to v (ties to the lower index).
int iq4nl_nearest(float v);
// Best IQ4_NL step for n values (largest magnitude to the -127 level, then one least-squares
// refinement when it lowers the error); q receives the level indices for that step.
float iq4nl_fit(const float* x, int n, uint8_t* q);

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb);
void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb);
void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb);
void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb);
void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb);

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb);
void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb);

}  // namespace pagoda::cpu::detail
