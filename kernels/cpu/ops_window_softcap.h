// CPU kernels of the gemma/phi3 forward beyond llama's: the tanh-GELU gate, scaling, logit
// soft-capping, and paged attention with a sliding window and/or soft-capped scores. Scalar
// code with fixed-order reductions (each row's result never depends on its batch mates); it is
// also the reference the CUDA versions are tested against. The GELU gate, the soft-capping and
// the attention run the AVX2 kernels (kernels/cpu/ops_avx2.cpp) where the CPU has AVX2 + FMA +
// F16C, with the same batch invariance (the scalar ones stay as detail::*_portable).
#pragma once

#include <cstdint>

#include "kernels/cpu/ops.h"

namespace pagoda::cpu {

// out = gelu_tanh(gate) * up over n elements, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g +
// 0.044715 g^3))) (Gemma's GeGLU); out may alias gate or up.
void gelu_mul_row(const float* gate, const float* up, float* out, int64_t n);

// x *= s over n elements.
void scale_row(float* x, float s, int64_t n);

// x = cap * tanh(x / cap) over n elements.
void softcap_row(float* x, float cap, int64_t n);

// Floats of scratch attention_group_ext needs for rows of up to n_q tokens whose last context
// is at most max_ctx, with KV rows of row_elems floats (the scalar kernel: 2 rows; the vector
// one: a tile of 8 head rows padded to 8).
inline int64_t attention_ext_scratch_floats(int n_q, int g, int max_ctx, int64_t row_elems) {
  return static_cast<int64_t>(n_q) * g * max_ctx + 2 * row_elems + 8 * ((row_elems + 7) / 8 * 8);
}

// attention_group (ops.h) where token r of the rows, at context c = n_ctx + r (position c - 1),
// attends only to the logical indices max(0, c - window) .. c - 1 when window > 0, and each
// scaled score s becomes softcap * tanh(s / softcap) when softcap > 0. Scores, softmax and the
// V sum run in index order, in F32.
void attention_group_ext(const AttnRows& r, int g, int head_dim, float scale, int window, float softcap,
                         const KvPool& k, const KvPool& v, int kv_head, const int32_t* block_table,
                         float* scratch);

}  // namespace pagoda::cpu
