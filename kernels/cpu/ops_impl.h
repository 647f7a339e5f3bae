// Internal to kernels/cpu/ops*.cpp (and their tests): the portable, AVX2 and AVX-512 variants of
// the ops declared in ops.h / ops_window_softcap.h, and the run-time checks that pick between them. Not a
// contract.
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace pagoda::cpu::detail {

// True when the CPU supports the AVX-512 F/BW/VL/DQ subset the wide ops use.
bool ops_have_avx512();
// True when the CPU supports AVX2 + FMA + F16C (ops_avx2.cpp). A read of the level
// best_cpu_isa() detected once, so the dispatchers call it per row.
bool ops_have_avx2();

// Dot product with 8 lane accumulators combined in a fixed order (the portable kernels' own).
float dot_portable(const float* a, const float* b, int64_t n);
void rms_norm_row_portable(const float* x, const float* w, float eps, float* y, int64_t n);
void silu_mul_row_portable(const float* gate, const float* up, float* out, int64_t n);
void softmax_row_portable(float* x, int64_t n);
void attention_group_portable(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                              const KvPool& v, int kv_head, const int32_t* block_table, float* scratch);

// IEEE half <-> float, round to nearest even (the same results as quants.h's scalar versions).
void f32_to_f16_avx512(const float* x, uint16_t* y, int64_t n);
void f16_to_f32_avx512(const uint16_t* x, float* y, int64_t n);
void rms_norm_row_avx512(const float* x, const float* w, float eps, float* y, int64_t n);
void silu_mul_row_avx512(const float* gate, const float* up, float* out, int64_t n);
void softmax_row_avx512(float* x, int64_t n);
// head_dim <= 256 (attention_avx512.cpp). attention_group_avx512 is attention_heads_avx512 for
// one KV head.
void attention_heads_avx512(const AttnRows& r, int g, int n_kv, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head0, const int32_t* block_table, float* scratch);
void attention_group_avx512(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                            const KvPool& v, int kv_head, const int32_t* block_table, float* scratch);

// The scalar gelu_mul_row and softcap_row (ops_window_softcap.h), the references of the vector ones.
void gelu_mul_row_portable(const float* gate, const float* up, float* out, int64_t n);
void softcap_row_portable(float* x, float cap, int64_t n);
// silu_mul_row, gelu_mul_row and softcap_row with AVX2 + FMA (exp256: about 1 ulp of expf); on
// AVX2 hosts, and on AVX-512 ones for the two of ops_window_softcap.h.
void silu_mul_row_avx2(const float* gate, const float* up, float* out, int64_t n);
void gelu_mul_row_avx2(const float* gate, const float* up, float* out, int64_t n);
void softcap_row_avx2(float* x, float cap, int64_t n);

// The scalar attention_group_ext (ops_window_softcap.h), the reference of the vector one.
void attention_group_ext_portable(const AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                                  const KvPool& k, const KvPool& v, int kv_head, const int32_t* block_table,
                                  float* scratch);
// attention_group_ext (ops_window_softcap.h; window 0 and softcap 0: attention_group) with AVX2 + FMA +
// F16C; head_dim <= 256. Scratch: attention_scratch_floats or attention_ext_scratch_floats.
void attention_group_avx2(const AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                          const KvPool& k, const KvPool& v, int kv_head, const int32_t* block_table, float* scratch);

}  // namespace pagoda::cpu::detail
