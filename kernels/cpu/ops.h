// Non-matmul CPU kernels of the transformer forward: RMSNorm, element-wise ops, softmax, RoPE
// (both GGUF conventions) and paged attention over a block table.
//
// Every function works on one row (or one group of tokens and one KV head or run of them) and is
// single-threaded; the backend spreads rows over its thread pool. Each row is always reduced in
// the same fixed order, so results never depend on how many rows run together or on which
// thread (batch invariance).
// The wide SIMD versions (kernels/cpu/ops_avx512.cpp, attention_avx512.cpp) are picked at run time
// when the CPU has AVX-512, and attention_group and silu_mul_row take the AVX2 kernels (kernels/cpu/ops_avx2.cpp)
// on CPUs with AVX2 + FMA + F16C but not AVX-512; they keep the same per-row order on a given
// machine.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/ggml_type.h"
#include "kernels/kv_layout.h"

namespace pagoda::cpu {

// y = x / sqrt(mean(x^2) + eps) * w over n elements (y may alias x).
void rms_norm_row(const float* x, const float* w, float eps, float* y, int64_t n);

// x += y over n elements.
void add_row(float* x, const float* y, int64_t n);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); out may alias gate or up.
void silu_mul_row(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax of n elements: max-subtracted exp, summed in a fixed order.
void softmax_row(float* x, int64_t n);

// ---- RoPE ----
// Rotary embedding parameters. Dimension pair i (0 <= i < n_rot/2) rotates by the angle
// pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i] (factor 1 when freq_factors is
// null). llama convention: the pair is (2i, 2i+1); NeoX (qwen2): (i, i + n_rot/2); the factor
// is indexed by the pair in both. Dimensions n_rot..head_dim-1 are left alone.
struct RopeParams {
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  bool neox = false;
  const float* freq_factors = nullptr;  // n_rot/2 positive divisors (GGUF rope_freqs.weight)
};

// inv_freq[i] = freq_base^(-2i/n_rot) / freq_factors[i] for i < n_rot/2, in double precision.
void rope_inv_freq(const RopeParams& p, double* inv_freq);

// Fills cos_out/sin_out (n_rot/2 entries each) with the rotation for position `pos` (a
// position or, for a K-shift, a position delta), from rope_inv_freq's table; angles in double.
void rope_angles(const RopeParams& p, const double* inv_freq, double pos, float* cos_out, float* sin_out);

// Rotates `n_heads` heads of a row (head h at x + h*head_dim) by precomputed angles.
void rope_apply(float* x, int n_heads, int head_dim, const RopeParams& p, const float* cos_v,
                const float* sin_v);

// ---- paged KV cache ----
// One layer's K or V pool: [num_blocks][block_size][n_kv_heads] head rows of head_dim values,
// F16, F32 or Q8_0 (each head row laid out as kernels/kv_layout.h says).
struct KvPool {
  void* data = nullptr;
  GgmlType type = GgmlType::F16;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t num_blocks = 0;

  int64_t row_elems() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
  int64_t block_elems() const { return row_elems() * block_size; }
  int64_t head_bytes() const { return kv_head_bytes(type, head_dim); }
  int64_t row_bytes() const { return head_bytes() * n_kv_heads; }  // one slot
  int64_t block_bytes() const { return row_bytes() * block_size; }
};

// Writes a token's K or V row (n_kv_heads*head_dim floats) to slot `slot` of `pool`.
void kv_store_row(const KvPool& pool, int64_t slot, const float* row);
// Reads `n_slots` consecutive slots starting at `slot` as floats.
void kv_load_rows(const KvPool& pool, int64_t slot, int64_t n_slots, float* out);

// Query rows for attention_group: n_q consecutive tokens of one sequence, token r attending to
// the logical indices 0..n_ctx+r-1. Token r's g query heads (head_dim floats each, back to
// back) are at q + r*q_stride; its output heads go to out + r*out_stride likewise.
struct AttnRows {
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int n_q = 1;
  int n_ctx = 0;  // context length of the first token (its position + 1)
  // Token trees: logical indices from tail_base on live at the explicit slots
  // tail_slots[i - tail_base] instead of the block table (a tree row's ancestors).
  int tail_base = INT_MAX;
  const int32_t* tail_slots = nullptr;
};

// The slot of logical index i of rows `r` (the one place tree rows differ from causal ones).
inline int64_t attention_slot(const AttnRows& r, const int32_t* block_table, int block_size, int i) {
  if (i >= r.tail_base) return r.tail_slots[i - r.tail_base];
  return static_cast<int64_t>(block_table[i / block_size]) * block_size + i % block_size;
}

// Floats of scratch attention_group (n_kv = 1) or attention_heads over n_kv KV heads needs: the
// larger of the score rows of the two-pass kernels (portable, AVX2) and the online-softmax state
// of the AVX-512 one (a tile, then per query row 16 scores, a max, 16 lane sums, a scale).
inline int64_t attention_scratch_floats(int n_q, int g, int head_dim, int n_ctx, int n_kv = 1) {
  const int64_t tile = 16 * ((head_dim + 15) / 16 * 16), rows = static_cast<int64_t>(n_q) * g;
  const int64_t two_pass = rows * (n_ctx + n_q) + tile;
  const int64_t online = tile + rows * 17 + rows * n_kv * 17;
  return two_pass > online ? two_pass : online;
}

// Attention for the `g` query heads that share KV head `kv_head` (GQA) of the rows `r`.
// Index i of the sequence lives in slot block_table[i / block_size] * block_size +
// i % block_size. Scores are scaled by `scale`, softmaxed in F32 and V is accumulated in index
// order. K/V rows are read once for all n_q*g query heads, but each row's arithmetic is exactly
// what it would be alone (n_q = 1): results never depend on how tokens are grouped.
// The AVX-512 kernel (kernels/cpu/attention_avx512.cpp) softmaxes online over tiles of 16 keys,
// the portable and AVX2 ones over the whole row first; they agree within 1e-5 (outputs in
// [-1, 1]), each bit-identical to itself across batches.
void attention_group(const AttnRows& r, int g, int head_dim, float scale, const KvPool& k,
                     const KvPool& v, int kv_head, const int32_t* block_table, float* scratch);

// attention_group for the n_kv KV heads kv_head0.. at once: r.q / r.out point at kv_head0's first
// query head, KV head kv_head0 + h's at + h * g * head_dim. Each head's results are bit for bit
// attention_group's; one call reads each slot's adjacent head rows together (whole runs of
// memory), which the AVX-512 kernel uses to read the cache at a higher rate.
void attention_heads(const AttnRows& r, int g, int n_kv, int head_dim, float scale, const KvPool& k,
                     const KvPool& v, int kv_head0, const int32_t* block_table, float* scratch);

// Rotates the K of every slot of `block` (all KV heads) by precomputed angles (a K-shift).
void kv_rope_block(const KvPool& k, int64_t block, const RopeParams& p, const float* cos_v,
                   const float* sin_v);

// Copies block `src` of the pool to block `dst`.
void kv_copy_block(const KvPool& pool, int64_t src, int64_t dst);
// Copies slot `src` of the pool to slot `dst` (one token's row, all KV heads).
void kv_copy_slot(const KvPool& pool, int64_t src, int64_t dst);

}  // namespace pagoda::cpu
