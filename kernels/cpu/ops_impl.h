// Internal to kernels/cpu/ops*.cpp: the AVX-512 variants of the ops declared in ops.h and the
// run-time check that picks them. Not part of any contract.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace pagoda::cpu::detail {

// True when the CPU (and OS) support the AVX-512 F/BW/VL subset and F16C the wide ops use.
bool ops_have_avx512();

void rms_norm_row_avx512(const float* x, const float* w, float eps, float* y, int64_t n);
void silu_mul_row_avx512(const float* gate, const float* up, float* out, int64_t n);
void softmax_row_avx512(float* x, int64_t n);
void attention_group_avx512(const float* q, int g, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head, const int32_t* block_table, int n_ctx,
                            float* scratch, float* out);

}  // namespace pagoda::cpu::detail
