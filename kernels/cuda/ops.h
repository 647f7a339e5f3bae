// Host-callable launchers of the CUDA kernels (one op per .cu file). Plain C++: no CUDA
// headers here, so engine/ can include it; streams are passed as opaque pointers
// (a cudaStream_t cast to void*; nullptr is the legacy default stream).
//
// Common conventions:
// - Every pointer argument is device memory unless it says "host".
// - Activations are F32 row-major; `n` is a number of rows (tokens).
// - The KV cache is F16, F32 or Q8_0, K and V each their own type (PagedKv::k_type / v_type),
//   one pool per layer for K and one for V,
//   laid out [num_blocks][block_size][n_kv_heads] head rows of head_dim values, each head row
//   as kernels/kv_layout.h says (the CPU backend's layout); a slot is block * block_size + offset.
// - Launchers only enqueue work; failures (bad launch configuration, missing kernel image)
//   throw pagoda::cuda::CudaError naming file and line. Nothing here synchronises the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/draw_params.h"
#include "kernels/ggml_type.h"

namespace pagoda::cuda {

// ---- devices (device_info.cu) ----

// Number of usable CUDA devices; 0 when there is no driver or no device.
int device_count();
// True when device 0 can be used; otherwise false and, when `why` is given, the reason
// (no driver, no device, driver too old, ...).
bool device_usable(std::string* why);
// Free and total memory of the current device, in bytes (cudaMemGetInfo).
void memory_info(size_t* free_bytes, size_t* total_bytes);

// ---- element-wise and row ops ----

// out[t, :] = table[tokens[t], :] as F32, for t < n. `table_type` is F32, F16, BF16 or a device
// quant type (is_device_quant_type; values as dequantize_to_bf16 decodes them, not rounded).
// Tokens outside [0, vocab) give a zero row (the caller validates tokens beforehand).
void embed(const void* table, GgmlType table_type, int64_t vocab, int64_t dim,
           const int32_t* tokens, int64_t n, float* out, void* stream);

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w, for i < n.
void rms_norm(const float* x, const float* w, float eps, float* out, int64_t n, int64_t cols,
              void* stream);

// rms_norm fused with its neighbours (rms_norm.cu): first x[i, :] += residual[i, :] when
// residual is not null (written back to x), then out = rms_norm(x) * w as above, and, when
// given, the normed rows also as bf16 into bf16_out ([n, cols], convert_to_bf16's rounding) and
// as int8 blocks into q8_acts (q8_acts_layout(n, cols), quantize_acts_q8's rule; cols % 32 ==
// 0). Each output equals the separate launches' bit for bit. out may alias x or residual.
void rms_norm_fused(float* x, const float* residual, const float* w, float eps, float* out, void* q8_acts,
                    void* bf16_out, int64_t n, int64_t cols, void* stream);

// In place: rotates the first n_rot dims of every head of x (n x n_heads*head_dim) by the angle
// positions[t] * freq_scale * freq_base^(-2i/n_rot). neox=false: pairs (2i, 2i+1) (llama);
// neox=true: pairs (i, i + n_rot/2) (NeoX / qwen2). freq_factors: null, or n_rot/2 device F32
// divisors of the pairs' frequencies (GGUF rope_freqs.weight, Llama 3.1 scaling).
void rope(float* x, const int32_t* positions, int64_t n, int n_heads, int head_dim, int n_rot,
          float freq_base, float freq_scale, bool neox, void* stream,
          const float* freq_factors = nullptr);

// x[i, :] += y[i, :] for i < n.
void add(float* x, const float* y, int64_t n, int64_t cols, void* stream);
// x[i, :] += bias for i < n (bias has `cols` entries).
void add_bias(float* x, const float* bias, int64_t n, int64_t cols, void* stream);
// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)), elementwise over n x cols.
void silu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols,
              void* stream);

// out = gelu_tanh(gate) * up elementwise over n x cols (gemma's GeGLU),
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
void gelu_mul(const float* gate, const float* up, float* out, int64_t n, int64_t cols, void* stream);
// In place over n x cols: x *= s (scale), or x = cap * tanh(x / cap) (softcap).
void scale(float* x, float s, int64_t n, int64_t cols, void* stream);
void softcap(float* x, float cap, int64_t n, int64_t cols, void* stream);

// ---- encoder models (encoder.cu) ----
// out[i, :] = (x[i, :] - mean) / sqrt(var + eps) * g + b for i < n (g, b: `cols` F32); out may alias x.
void layer_norm(const float* x, const float* g, const float* b, float eps, float* out, int64_t n, int64_t cols,
                void* stream);
// Bidirectional attention within each input: rows starts[b] .. starts[b+1]-1 (device int32,
// n_inputs + 1 entries from 0 to n_rows) attend to each other only; q, k, v, out [n_rows x
// n_heads * head_dim]; max_len: the longest input's rows; scale 1/sqrt(head_dim).
void encoder_attention(const float* q, const float* k, const float* v, float* out, const int32_t* starts,
                       int n_inputs, int64_t n_rows, int max_len, int n_heads, int head_dim, void* stream);

// out[j, :] = x[rows[j], :] for j < n_rows.
void gather_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t cols, float* out,
                 void* stream);

// Mixture of experts (moe_combine.cu): out[i, :] = sum over j < k, in j order, of
// weights[i*k+j] * y[place[i*k+j], :], plus shared_weights[i] * shared[i, :] when shared is not
// null; for i < n, rows of dim floats.
void moe_combine(const float* y, const int32_t* place, const float* weights, int k, const float* shared,
                 const float* shared_weights, int64_t n, int64_t dim, float* out, void* stream);

// Mixture-of-experts routing on the device (moe_route.cu), for up to kMoeRouteMaxTokens
// tokens: from router logits (F32 rows of ld floats: n_experts values, then the shared
// expert's gate logit when `shared`), per token the top-k experts and weights of
// cpu::moe_route_row (normalized when `normalize`) and the shared gate sigmoid(logit), and the
// grouping cpu::moe_group makes, into one buffer of moe_route_layout(n, k, n_experts).bytes
// whose parts sit at the layout's offsets (4-byte words from the start):
//   token_of_row[n*k]   the token of each gathered row (rows grouped by expert, in id order)
//   place[n*k]          the gathered row of entry i*k + j (token i's j-th expert)
//   weights[n*k]        float, entry i*k + j's weight; shared_weights[n] float
//   n_groups[c]         how many experts have exactly c entries (c = 1..kMoeRouteMaxTokens)
//   table_at[c]         2 * table_cap[c] ints: their (expert, first gathered row), in id order
// (the rest is the kernel's scratch). Everything but n_groups' values and the tables' used
// length is fixed by (n, k, n_experts): what a CUDA graph of the step needs.
constexpr int kMoeRouteMaxTokens = 8;
struct MoeRouteLayout {
  size_t exps = 0, sums = 0, taken = 0, ids = 0, counts = 0, offsets = 0;
  size_t token_of_row = 0, place = 0, weights = 0, shared_weights = 0, n_groups = 0, tables = 0;
  size_t table_at[kMoeRouteMaxTokens + 1] = {};
  int table_cap[kMoeRouteMaxTokens + 1] = {};
  size_t bytes = 0;
};
MoeRouteLayout moe_route_layout(int64_t n, int k, int n_experts);
void moe_route(const float* logits, int64_t ld, int64_t n, int n_experts, int k, bool normalize, bool shared,
               void* buf, void* stream);

// ---- small-batch matmul ----

// Activation rows up to which gemv_bf16 serves a matmul.
constexpr int kGemvMaxRows = 4;
// out[i * ld_out + r] = sum_k x[i, k] W[r, k] for i < n, r < rows: W bf16 [rows, cols], x bf16
// [n, cols], f32 out (kernels/cuda/gemv.cu). Returns false, launching nothing, unless
// 1 <= n <= kGemvMaxRows, cols % 8 == 0 and W and x are 16-byte aligned.
bool gemv_bf16(const void* w, const void* x, float* out, int64_t n, int64_t rows, int64_t cols,
               int64_t ld_out, void* stream);

// Activation rows up to which gemv_quant serves a matmul of quantized weights.
constexpr int kQuantGemvMaxRows = 8;
// Whether `type` is a GGML block type the kernels read directly (quantized weights kept in
// their GGUF bits): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
bool is_device_quant_type(GgmlType type);
// out[i * ld_out + r] = sum_k x[i * ld_x + k] W[r, k] for i < n, r < rows: W [rows, cols] in the
// GGUF blocks of `type`, x and out F32 (kernels/cuda/gemv_quant.cu). Returns false, launching
// nothing, unless 1 <= n <= kQuantGemvMaxRows, `type` is a device quant type, cols is a
// multiple of its block, x is 16-byte aligned with ld_x % 4 == 0 and W 2-byte aligned.
bool gemv_quant(const void* w, GgmlType type, const float* x, float* out, int64_t n, int64_t rows,
                int64_t cols, int64_t ld_x, int64_t ld_out, void* stream);
// The int8 form of the same product (kernels/cuda/gemv_dp4a.cu): quantize_acts_q8 turns x F32
// [n, cols] (cols % 32 == 0) into int8 blocks of 32 with a scale and half-block sums, as the
// CPU's int8 kernels quantize activations, laid out in one buffer of q8_acts_layout(n,
// cols).bytes (16-byte aligned); gemv_quant_dp4a multiplies W by them with dp4a. Same return
// rule as gemv_quant (the buffer 16-byte aligned instead of x).
struct Q8ActsLayout {
  size_t q_offset = 0, d_offset = 0, sum_offset = 0, bytes = 0;  // int8 [n*cols], f32 [n*cols/32], i32 [n*cols/16]
};
Q8ActsLayout q8_acts_layout(int64_t n, int64_t cols);
void quantize_acts_q8(const float* x, int64_t n, int64_t cols, int64_t ld_x, void* acts, void* stream);
bool gemv_quant_dp4a(const void* w, GgmlType type, const void* acts, float* out, int64_t n, int64_t rows,
                     int64_t cols, int64_t ld_out, void* stream);
// Mixture-of-experts form: n_groups groups (at most 65,535) of n rows each in one launch. groups
// is a device array of 2 * n_groups: group g multiplies activation rows f..f+n-1 (f =
// groups[2g + 1]) of acts (acts_rows quantized rows, q8_acts_layout(acts_rows, cols)) by expert
// e = groups[2g]'s [rows, cols] matrix, the e-th of the stacked matrices at w, into out rows
// f..f+n-1. Each output equals what gemv_quant_dp4a gives for that row alone (bit for bit).
bool gemv_quant_dp4a_grouped(const void* w, GgmlType type, const int32_t* groups, int n_groups, const void* acts,
                             int64_t acts_rows, float* out, int64_t n, int64_t rows, int64_t cols, int64_t ld_out,
                             void* stream);

// The grouped form with the group count on the device (a step whose routing never reached the
// host, moe_route): launches max_groups groups, of which the first *n_groups (a device int) run
// and the rest return at once, so the launch's shape does not depend on the routing.
bool gemv_quant_dp4a_grouped_dev(const void* w, GgmlType type, const int32_t* groups, int max_groups,
                                 const int32_t* n_groups, const void* acts, int64_t acts_rows, float* out, int64_t n,
                                 int64_t rows, int64_t cols, int64_t ld_out, void* stream);

// ---- greedy draws fused into the LM head (gemv.cu, gemv_dp4a.cu, argmax_pick.cu) ----
// When every draw of a matmul's output rows is plain greedy (argmax, lowest id on ties), the
// output need not be written: the *_argmax GEMVs compute the same sums as gemv_bf16 /
// gemv_quant_dp4a (the same bits) and keep, per warp and activation row, the largest
// ArgmaxKey (kernels/argmax_key.h) into keys [n, argmax_parts(rows)] (row-major); argmax_pick
// reduces a row's keys to its token. Same shape rules and return values as the plain GEMVs.

// Warps (keys per activation row) of a fused launch over `rows` weight rows: one per 4-row
// group, at most kArgmaxMaxParts (each warp then walks several rows).
constexpr int64_t kArgmaxMaxParts = 2048;
inline int64_t argmax_parts(int64_t rows) {
  const int64_t parts = (rows + 3) / 4 * 4;
  return parts < kArgmaxMaxParts ? parts : kArgmaxMaxParts;
}
bool gemv_bf16_argmax(const void* w, const void* x, uint64_t* keys, int64_t n, int64_t rows, int64_t cols,
                      void* stream);
bool gemv_quant_dp4a_argmax(const void* w, GgmlType type, const void* acts, uint64_t* keys, int64_t n, int64_t rows,
                            int64_t cols, void* stream);
// out[i] = the token of draw i: the max of keys row rows[i] - row_base's `parts` keys, as
// argmax_key_token reads it (0 when the row had no finite logit). rows: device array.
void argmax_pick(const uint64_t* keys, int64_t parts, const int32_t* rows, int64_t row_base, int64_t n_draws,
                 int32_t* out, void* stream);

// The same product for more rows (prefill, large batches) on tensor cores
// (kernels/cuda/gemm_quant_mma.cu): tiles of W decoded into shared memory as bf16, x rounded to
// bf16, f32 sums; out[i * ld_out + r] for i < n, r < rows, no bf16 copy of the matrix. Returns
// false, launching nothing, unless `type` is a device quant type, cols is a multiple of its
// block, W is 2-byte and x 4-byte aligned and the sizes fit the grid (n < 2^22).
bool gemm_quant_mma(const void* w, GgmlType type, const float* x, float* out, int64_t n, int64_t rows,
                    int64_t cols, int64_t ld_x, int64_t ld_out, void* stream);

// The batch-invariant form for any number of rows (kernels/cuda/gemm_int8_mma.cu): the product
// gemv_quant_dp4a computes, on int8 tensor cores, for n >= 1 activation rows quantized by
// quantize_acts_q8 (n rows, cols): every output bit-identical to gemv_quant_dp4a's for that
// row alone. Returns false, launching nothing, unless `type` is a device quant type, cols is a
// multiple of its block, acts is 16-byte aligned, W 2-byte aligned and rows <= 65535 * 32.
bool gemm_quant_int8(const void* w, GgmlType type, const void* acts, float* out, int64_t n, int64_t rows,
                     int64_t cols, int64_t ld_out, void* stream);
// Test hook for the instruction gemm_quant_int8 uses: c (16x8 int32, row-major) = A B + 1..4,
// one warp, one mma_s8_m16n8k16 (kernels/cuda/mma.cuh), A 16x16 int8 row-major, B 16x8 int8
// stored b[k * 8 + col]; lane 4g + t's accumulator starts at {1, 2, 3, 4} (c[g][2t] += 1,
// c[g][2t+1] += 2, c[g+8][2t] += 3, c[g+8][2t+1] += 4).
void mma_s8_probe(const int8_t* a, const int8_t* b, int32_t* c, void* stream);

// ---- conversions for weights ----

// n elements of F32 or F16 at src to bf16 at dst (round to nearest even).
void convert_to_bf16(const void* src, GgmlType src_type, int64_t n, void* dst, void* stream);
// n elements (a multiple of the block size) of a device quant type (is_device_quant_type) to
// bf16, following the GGML block layouts (kernels/cpu/quants*.cpp is the reference).
void dequantize_to_bf16(const void* src, GgmlType src_type, int64_t n, void* dst, void* stream);
// n elements of F32, F16 or BF16 to F32 (1-D weights: norms, biases).
void convert_to_f32(const void* src, GgmlType src_type, int64_t n, float* dst, void* stream);

// ---- KV cache ----

// One layer's view of the paged cache.
struct PagedKv {
  void* k = nullptr;  // [num_blocks][block_size][n_kv_heads] head rows of `k_type`
  void* v = nullptr;  // the same of `v_type`
  GgmlType k_type = GgmlType::F16;  // F16, F32 or Q8_0
  GgmlType v_type = GgmlType::F16;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Writes rows k[t], v[t] (F32, n_kv_heads*head_dim each) to slot slots[t] of the layer, in the
// cache's types (Q8_0: quantized group by group by the CPU's rule). Negative slots are skipped.
void store_kv(const float* k, const float* v, const int32_t* slots, int64_t n, const PagedKv& kv,
              void* stream);

// rope(q, n_heads), rope(k, kv.n_kv_heads) and store_kv(k, v) in one launch
// (rope_store_kv.cu), with the same results: q and k are rotated in place (head_dim =
// kv.head_dim for both), the rotated k and v are written to slot slots[t] (skipped when
// negative) for t < n. n_rot even, at most head_dim <= kMaxHeadDim.
void rope_store_kv(float* q, float* k, const float* v, const int32_t* positions, const int32_t* slots, int64_t n,
                   int n_heads, int n_rot, float freq_base, float freq_scale, bool neox, const float* freq_factors,
                   const PagedKv& kv, void* stream);

// The whole cache (all layers) for cache edits: layer l's K pool starts at
// k_base + l * k_layer_stride halves (2-byte units; every layout is a whole number of them),
// its V pool at v_base + l * v_layer_stride (the strides differ when the types do).
struct KvPools {
  void* k_base = nullptr;
  void* v_base = nullptr;
  GgmlType k_type = GgmlType::F16;  // F16, F32 or Q8_0
  GgmlType v_type = GgmlType::F16;
  int64_t k_layer_stride = 0;  // halves between consecutive layers' K pools
  int64_t v_layer_stride = 0;  // ... V pools
  int n_layers = 0;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// For each i < n: copies every slot (K and V, all layers) of block pairs[2i] into block
// pairs[2i+1]. Assumes no destination is also a source in the same call.
void block_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream);

// For each i < n: copies slot pairs[2i] (K and V rows, all layers) into slot pairs[2i+1]
// (speculative decoding's accepted tree nodes). Assumes no destination is also a source.
void slot_copy(const KvPools& pools, const int32_t* pairs, int n, void* stream);

// For each i < n: re-ropes in place the K of every slot of block shifts[2i] (all layers, all
// KV heads) by shifts[2i+1] positions (rotation by delta * freq_scale * theta_i, same pairing
// as rope(), with the same optional freq_factors). V is untouched. Assumes the blocks are
// distinct.
void k_shift(const KvPools& pools, const int32_t* shifts, int n, int n_rot, float freq_base,
             float freq_scale, bool neox, void* stream, const float* freq_factors = nullptr);

// ---- attention ----

// The step's index arrays the attention kernels read.
struct AttnIndex {
  const int32_t* positions = nullptr;     // [n_tokens]: a token attends to logical 0..position
  const int32_t* token_bt = nullptr;      // [n_tokens]: offset of its sequence's block table
  const int32_t* block_tables = nullptr;  // concatenated block tables
  // Token trees (speculative decoding; decode and attention_ext kernels): null, or per token -1 (causal) or
  // an offset o into tree_slots where tree_slots[o] = the first logical index read from the
  // list (the sequence's n_past) and tree_slots[o + 1 ..] the slots of that index onwards
  // (the row's ancestors and itself).
  const int32_t* tree_index = nullptr;
  const int32_t* tree_slots = nullptr;
};

// Keys per split of the decode kernel: a decode row with context c uses ceil(c / this) splits,
// a number that depends only on that row, so results do not depend on batch mates.
constexpr int kDecodeSplitKeys = 512;
// Largest head_dim the attention kernels support.
constexpr int kMaxHeadDim = 256;
// Query rows per tile of the prefill kernel.
constexpr int kPrefillTileQ = 16;

// Floats of scratch attention_decode needs for n_rows rows with contexts up to max_ctx.
size_t attention_decode_workspace(int64_t n_rows, int n_heads, int head_dim, int max_ctx);

// Single-query attention for the token rows rows[0..n_rows): for each query head h (KV head
// h / (n_heads / n_kv_heads)), softmax(scale * q.K) V over the token's logical 0..position.
// q and out are [n_tokens x n_heads*head_dim]. `max_ctx` bounds position + 1 over the rows;
// `workspace` holds attention_decode_workspace(...) floats. window and softcap as in
// attention_ext (0: none).
void attention_decode(const float* q, float* out, int n_heads, float scale, const PagedKv& kv,
                      const AttnIndex& idx, const int32_t* rows, int64_t n_rows, int max_ctx,
                      float* workspace, void* stream, int window = 0, float softcap = 0.0f);

// Causal attention for tiles of query rows: tiles[2i] is the first token of tile i and
// tiles[2i+1] its count (1..kPrefillTileQ); a tile's tokens belong to one sequence. Same
// semantics as attention_decode for every row.
void attention_prefill(const float* q, float* out, int n_heads, float scale, const PagedKv& kv,
                       const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles, void* stream);

// attention_decode's semantics for every token of the tiles (as attention_prefill's), with
// token t attending only to logical max(0, positions[t] + 1 - window) .. positions[t] when
// window > 0, and each scaled score s replaced by softcap * tanh(s / softcap) when softcap > 0
// (attention_window_softcap.cu). Decode rows take attention_decode with the same window and cap.
void attention_ext(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                   const PagedKv& kv, const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles,
                   void* stream);

// The tiles of attention_prefill (window 0, softcap 0) or attention_ext on tensor cores
// (attention_prefill_mma.cu: f16 MMAs, f32 softmax): the same semantics up to f16 rounding
// of q, K, V and the softmax weights. Returns false, launching nothing, when head_dim is not
// one it is built for (64, 80, 96, 128, 256): the caller then runs the exact kernels.
bool attention_prefill_mma(const float* q, float* out, int n_heads, float scale, int window, float softcap,
                           const PagedKv& kv, const AttnIndex& idx, const int32_t* tiles, int64_t n_tiles,
                           void* stream);

// ---- sampling ----

// Samples one token per row of logits (n_rows x vocab) into out[row] with params[row] (a device
// array of n_rows; kernels/draw_params.h). Deterministic for a given (logits, params): the
// uniform draw is philox_uniform(seed, counter), see philox.h. A row whose params carry a token
// mask or edits is edited in place first (masked tokens to -inf, edits by edited_logit), and a
// draw asking for logprobs writes them to params[row].logprobs_out.
void sample(float* logits, int64_t n_rows, int vocab, const DrawParams* params, int32_t* out, void* stream);

// The same rule for n_draws draws where draw i reads logits row rows[i] - row_base (rows:
// device array of n_draws) with params[i] into out[i]; a row may be read by several draws, which
// are then consecutive and carry the same mask and edits (the row's first draw applies them).
void sample_rows(float* logits, int vocab, const int32_t* rows, int64_t row_base, int64_t n_draws,
                 const DrawParams* params, int32_t* out, void* stream);

}  // namespace pagoda::cuda
