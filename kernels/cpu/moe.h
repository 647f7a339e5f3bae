// Mixture-of-experts kernels for the CPU: the router's top-k of one token, the grouping of a
// step's tokens by expert, and the routed experts' FFN over those groups (tokens gathered per
// expert, one matmul per active expert and matrix, results combined per token).
//
// Batch invariance: a token's experts, weights and sum order depend on its own router logits
// only; matmul computes each gathered row independently of the rows beside it (matmul.h); the
// combine adds a token's terms in its own slot order. So a token's output never depends on its
// batch mates, nor on the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_pack.h"
#include "kernels/ggml_type.h"

namespace pagoda::cpu {

// The router of one token, as llama.cpp's build_moe_ffn does it with softmax gating: p =
// softmax(logits[0 .. n_experts)), the k experts of largest p in descending order (equal p:
// the lower id first) into ids[0 .. k), their p into weights[0 .. k), divided by the sum of
// those k when `normalize` (Mixtral, Qwen3-MoE; not Qwen2-MoE). 1 <= k <= n_experts.
void moe_route_row(const float* logits, int n_experts, int k, bool normalize, int32_t* ids,
                   float* weights);

// A step's (token, slot) entries grouped by expert: entry i*k + j is token i's j-th expert.
// Expert e's entries are entries[offsets[e] .. offsets[e+1]), in token order; place[i*k + j]
// is that entry's position in `entries` (the row it is gathered to).
struct MoeGroups {
  std::vector<int32_t> offsets;  // n_experts + 1
  std::vector<int32_t> entries;  // n * k
  std::vector<int32_t> place;    // n * k
};
// Throws std::invalid_argument for an expert id outside [0, n_experts).
void moe_group(const int32_t* ids, int64_t n, int k, int n_experts, MoeGroups& g);

// One layer's routed experts, stacked as GGUF stores them (3-D tensors, expert outermost):
// expert e's gate and up are rows [e*ff, (e+1)*ff) of [n_experts*ff x dim] matrices, its down
// rows [e*dim, (e+1)*dim) of a [n_experts*dim x ff] matrix, each in its GGML type.
struct MoeExperts {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  GgmlType gate_type = GgmlType::F32, up_type = GgmlType::F32, down_type = GgmlType::F32;
  // Which of them are in decode layout `layout` (weight_pack.h; one host packs every matrix in
  // its level's layout): expert e's rows are then a packed matrix of their own, ff (gate, up) or
  // dim (down) being a multiple of the layout's group rows.
  bool gate_packed = false, up_packed = false, down_packed = false;
  DecodeLayout layout = DecodeLayout::Tiles8;
  int n_experts = 0;
  int64_t dim = 0;
  int64_t ff = 0;
};

// Buffers moe_ffn reuses between calls (they only grow).
struct MoeScratch {
  MoeGroups groups;
  std::vector<float> xg, gate, up, y;
};

// For i < n: out[i] = sum over j < k, in j order, of weights[i*k+j] * E_e(x[i]) with
// e = ids[i*k+j] and E_e(v) = down_e (silu(gate_e v) * up_e v); then, when `shared` is not null,
// out[i] += shared_weights[i] * shared[i] (a [n x dim] row-major F32 input, e.g. Qwen2-MoE's
// gated shared expert). x and out are [n x dim] F32 and must not overlap.
void moe_ffn(ThreadPool& pool, const MoeExperts& w, const float* x, int64_t n, int k,
             const int32_t* ids, const float* weights, const float* shared,
             const float* shared_weights, float* out, MoeScratch& s);

// The combine step alone (also the CUDA backend's host reference): out[i] = sum_j
// weights[i*k+j] * y[place[i*k+j]] (+ shared_weights[i] * shared[i]) over rows of `dim`.
void moe_combine(const float* y, const int32_t* place, const float* weights, int k,
                 const float* shared, const float* shared_weights, int64_t n, int64_t dim,
                 float* out);

}  // namespace pagoda::cpu
