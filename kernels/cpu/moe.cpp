// Mixture-of-experts on the CPU: top-k routing, grouping by expert, the grouped expert FFN and
// the weighted combine (see moe.h for the contract and why it is batch invariant).
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace pagoda::cpu {

void moe_route_row(const float* logits, int n_experts, int k, bool normalize, int32_t* ids,
                   float* weights) {
  if (n_experts <= 0 || k <= 0 || k > n_experts)
    throw std::invalid_argument("moe_route_row: need 1 <= k <= n_experts");
  // Softmax in double: the probabilities decide which experts run, so they are computed as
  // as exactly as is cheap (n_experts is small).
  float mx = logits[0];
  for (int e = 1; e < n_experts; ++e) mx = std::max(mx, logits[e]);
  double sum = 0;
  for (int e = 0; e < n_experts; ++e) sum += std::exp(double(logits[e]) - double(mx));
  // Selection by repeated maximum over the logits (softmax is monotone): k is small, and the
  // strict comparison keeps the lower id first among equal values.
  uint64_t taken_lo = 0;  // bitmap for the first 64 experts; a list beyond
  std::vector<char> taken_hi(n_experts > 64 ? size_t(n_experts) : 0, 0);
  auto taken = [&](int e) { return e < 64 ? ((taken_lo >> e) & 1) != 0 : taken_hi[size_t(e)] != 0; };
  double chosen_sum = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n_experts; ++e)
      if (!taken(e) && (best < 0 || logits[e] > logits[best])) best = e;
    if (best < 64) taken_lo |= uint64_t{1} << best;
    else taken_hi[size_t(best)] = 1;
    ids[j] = best;
    const double p = std::exp(double(logits[best]) - double(mx)) / sum;
    weights[j] = float(p);
    chosen_sum += p;
  }
  if (normalize)
    for (int j = 0; j < k; ++j) weights[j] = float(double(weights[j]) / chosen_sum);
}

void moe_group(const int32_t* ids, int64_t n, int k, int n_experts, MoeGroups& g) {
  const int64_t total = n * k;
  g.offsets.assign(size_t(n_experts) + 1, 0);
  for (int64_t i = 0; i < total; ++i) {
    const int32_t e = ids[i];
    if (e < 0 || e >= n_experts)
      throw std::invalid_argument("moe_group: expert id " + std::to_string(e) + " outside [0, " +
                                  std::to_string(n_experts) + ")");
    ++g.offsets[size_t(e) + 1];
  }
  for (int e = 0; e < n_experts; ++e) g.offsets[size_t(e) + 1] += g.offsets[size_t(e)];
  g.entries.resize(size_t(total));
  g.place.resize(size_t(total));
  std::vector<int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  for (int64_t i = 0; i < total; ++i) {  // entry order = token order within each expert
    const int32_t at = next[size_t(ids[i])]++;
    g.entries[size_t(at)] = int32_t(i);
    g.place[size_t(i)] = at;
  }
}

void moe_combine(const float* y, const int32_t* place, const float* weights, int k,
                 const float* shared, const float* shared_weights, int64_t n, int64_t dim,
                 float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * dim;
    std::fill(o, o + dim, 0.0f);
    for (int j = 0; j < k; ++j) {
      const float w = weights[i * k + j];
      const float* r = y + int64_t(place[i * k + j]) * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] += w * r[c];
    }
    if (shared != nullptr) {
      const float w = shared_weights[i];
      const float* r = shared + i * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] += w * r[c];
    }
  }
}

namespace {
// One expert's matrix: its rows of the stacked matrix, GGML or decode layout.
void expert_matmul(ThreadPool& pool, DecodeLayout layout, GgmlType type, bool packed, const uint8_t* w, int64_t rows,
                   int64_t cols, const float* x, int64_t n, float* out) {
  if (packed) matmul_decode_layout(pool, layout, type, w, rows, cols, x, n, out);
  else matmul(pool, type, w, rows, cols, x, n, out);
}
}  // namespace

void moe_ffn(ThreadPool& pool, const MoeExperts& w, const float* x, int64_t n, int k,
             const int32_t* ids, const float* weights, const float* shared,
             const float* shared_weights, float* out, MoeScratch& s) {
  if (n <= 0) return;
  const int64_t rows = n * k, dim = w.dim, ff = w.ff;
  moe_group(ids, n, k, w.n_experts, s.groups);
  const MoeGroups& g = s.groups;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (v.size() < size_t(size)) v.resize(size_t(size));
  };
  grow(s.xg, rows * dim);
  grow(s.gate, rows * ff);
  grow(s.up, rows * ff);
  grow(s.y, rows * dim);
  for (int64_t r = 0; r < rows; ++r)  // gather: row r is the token of entry r
    std::memcpy(s.xg.data() + r * dim, x + int64_t(g.entries[size_t(r)] / k) * dim,
                sizeof(float) * size_t(dim));
  const size_t gate_row = ggml_row_size(w.gate_type, dim), up_row = ggml_row_size(w.up_type, dim);
  const size_t down_row = ggml_row_size(w.down_type, ff);
  for (int e = 0; e < w.n_experts; ++e) {
    const int64_t first = g.offsets[size_t(e)], m = g.offsets[size_t(e) + 1] - first;
    if (m == 0) continue;
    const auto* gate = static_cast<const uint8_t*>(w.gate) + size_t(e) * size_t(ff) * gate_row;
    const auto* up = static_cast<const uint8_t*>(w.up) + size_t(e) * size_t(ff) * up_row;
    const auto* down = static_cast<const uint8_t*>(w.down) + size_t(e) * size_t(dim) * down_row;
    float* gx = s.gate.data() + first * ff;
    float* ux = s.up.data() + first * ff;
    expert_matmul(pool, w.layout, w.gate_type, w.gate_packed, gate, ff, dim, s.xg.data() + first * dim, m, gx);
    expert_matmul(pool, w.layout, w.up_type, w.up_packed, up, ff, dim, s.xg.data() + first * dim, m, ux);
    for (int64_t r = 0; r < m; ++r) silu_mul_row(gx + r * ff, ux + r * ff, gx + r * ff, ff);
    expert_matmul(pool, w.layout, w.down_type, w.down_packed, down, dim, ff, gx, m, s.y.data() + first * dim);
  }
  moe_combine(s.y.data(), g.place.data(), weights, k, shared, shared_weights, n, dim, out);
}

}  // namespace pagoda::cpu
