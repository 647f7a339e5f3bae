// CpuBackend's ops of the gemma/phi3 forward: attention with a sliding window and/or
// soft-capped scores, scaling, the tanh-GELU gate and logit soft-capping (kernels/cpu/ops_window_softcap.h).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/backend_cpu.h"
#include "kernels/cpu/ops_window_softcap.h"
#include "kernels/cpu/thread_pool.h"

namespace pagoda {
namespace {

float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

void check(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("CpuBackend: ") + what);
}

void check_rows(const Tensor& t, int64_t n, const char* what) { check(n >= 0 && n <= t.rows && t.data, what); }

}  // namespace

void CpuBackend::each_row(int64_t n, int64_t cost_per_row, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (n == 1 || n * cost_per_row < 32 * 1024 || n_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  pool_->parallel_for(n, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t i = begin; i < end; ++i) fn(i, thread);
  });
}

void CpuBackend::attention_ext(int layer, const Tensor& q, Tensor& out, int n_heads, int n_kv_heads,
                               int head_dim, float scale, const AttentionExtras& extras) {
  check(extras.window >= 0 && extras.softcap >= 0, "attention_ext: negative window or softcap");
  // Nothing to cut and nothing to cap: the plain (vectorised) kernel gives the same scores.
  if (extras.softcap == 0 && (extras.window == 0 || max_ctx_ <= extras.window))
    return attention(layer, q, out, n_heads, n_kv_heads, head_dim, scale);
  const cpu::KvPool kp = k_pool(layer), vp = v_pool(layer);
  check_attention(kp, q, out, n_heads, n_kv_heads, head_dim);
  const int g = n_heads / n_kv_heads;
  const size_t need = static_cast<size_t>(
      std::max(cpu::attention_ext_scratch_floats(kAttnGroup, g, max_ctx_, kp.row_elems()),
               cpu::attention_scratch_floats(kAttnGroup, g, head_dim, max_ctx_)));
  for (auto& s : scratch_)
    if (s.size() < need) s.resize(need);
  // One task per (attention group, KV head), as in attention(). Within a group, the rows whose
  // context fits the window (and with no cap) take the plain kernel, the rest the windowed one:
  // a row's kernel depends on its own context only, so results stay batch invariant.
  const int64_t n_tasks = static_cast<int64_t>(attn_groups_.size()) * n_kv_heads;
  each_row(n_tasks, int64_t{g} * head_dim * std::min(max_ctx_, extras.window > 0 ? extras.window : max_ctx_),
           [&](int64_t task, int thread) {
             const AttnGroup& grp = attn_groups_[static_cast<size_t>(task / n_kv_heads)];
             const int kvh = static_cast<int>(task % n_kv_heads);
             const SeqInStep& seq = plan_.seqs[static_cast<size_t>(plan_.token_seq[static_cast<size_t>(grp.first)])];
             const int32_t* table = plan_.block_tables.data() + seq.block_table_offset;
             float* scratch = scratch_[static_cast<size_t>(thread)].data();
             cpu::AttnRows rows = group_rows(grp, kvh, q, out, g, head_dim);
             const int n_plain =
                 extras.softcap > 0 ? 0 : std::clamp(extras.window - rows.n_ctx + 1, 0, static_cast<int>(grp.n));
             if (n_plain > 0) {
               rows.n_q = n_plain;
               cpu::attention_group(rows, g, head_dim, scale, kp, vp, kvh, table, scratch);
             }
             if (n_plain < grp.n) {
               rows.q += n_plain * rows.q_stride;
               rows.out += n_plain * rows.out_stride;
               rows.n_ctx += n_plain;
               rows.n_q = grp.n - n_plain;
               cpu::attention_group_ext(rows, g, head_dim, scale, extras.window, extras.softcap, kp, vp, kvh,
                                        table, scratch);
             }
           });
}

void CpuBackend::apply_cache_edits_per_layer(const std::vector<RopeConfig>& rope_of_layer) {
  const int n_layers = static_cast<int>(k_pools_.size());
  check(static_cast<int>(rope_of_layer.size()) == n_layers, "apply_cache_edits_per_layer: one RoPE per layer");
  // The copies first (apply_cache_edits with the shifts held back), then each layer's shifts.
  std::vector<KShift> shifts;
  shifts.swap(plan_.k_shifts);
  apply_cache_edits(rope_of_layer.front());
  plan_.k_shifts.swap(shifts);
  for (int l = 0; l < n_layers; ++l) {
    const RopeConfig& rope = rope_of_layer[static_cast<size_t>(l)];
    check(rope.freq_factors.data == nullptr || rope.freq_factors.cols == rope.head_dim / 2,
          "apply_cache_edits_per_layer: freq_factors must cover head_dim/2 pairs");
    const cpu::RopeParams rp{rope.head_dim, rope.freq_base, rope.freq_scale, rope.neox,
                             static_cast<const float*>(rope.freq_factors.data)};
    const int half = rope.head_dim / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    std::vector<float> cs(static_cast<size_t>(2 * half));
    cpu::rope_inv_freq(rp, inv_freq.data());
    for (const KShift& s : plan_.k_shifts) {
      cpu::rope_angles(rp, inv_freq.data(), s.delta, cs.data(), cs.data() + half);
      cpu::kv_rope_block(k_pool(l), s.block, rp, cs.data(), cs.data() + half);
    }
  }
}

void CpuBackend::scale(Tensor& x, float s, int64_t n) {
  check_rows(x, n, "scale: n exceeds the rows");
  each_row(n, x.cols, [&](int64_t i, int) { cpu::scale_row(f32(x) + i * x.cols, s, x.cols); });
}

void CpuBackend::gelu_mul(const Tensor& gate, const Tensor& up, Tensor& out, int64_t n) {
  check(gate.cols == up.cols && out.cols == gate.cols, "gelu_mul: widths differ");
  check_rows(gate, n, "gelu_mul: n exceeds the rows of gate");
  check_rows(up, n, "gelu_mul: n exceeds the rows of up");
  check_rows(out, n, "gelu_mul: n exceeds the rows of out");
  each_row(n, gate.cols * 8, [&](int64_t i, int) {
    cpu::gelu_mul_row(f32(gate) + i * gate.cols, f32(up) + i * up.cols, f32(out) + i * out.cols, gate.cols);
  });
}

void CpuBackend::softcap(Tensor& x, float cap, int64_t n) {
  check(cap > 0, "softcap: the cap must be positive");
  check_rows(x, n, "softcap: n exceeds the rows");
  each_row(n, x.cols * 8, [&](int64_t i, int) { cpu::softcap_row(f32(x) + i * x.cols, cap, x.cols); });
}

}  // namespace pagoda
