#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/model_lora.h"
#include "engine/model/model_weights.h"
#include "engine/model/moe_ffn.h"

namespace pagoda {
namespace {

// A view of rows [first, first + rows) of an F32 activation tensor.
Tensor row_view(const Tensor& t, int64_t first, int64_t rows) {
  Tensor v = t;
  v.data = static_cast<float*>(t.data) + first * t.cols;
  v.rows = rows;
  return v;
}

}  // namespace

struct Model::Impl {
  ModelConfig cfg;
  std::unique_ptr<Backend> be;
  int max_tokens = 0;
  ModelWeights w;
  RopeConfig rope;        // every layer's, or the global layers' when local ones differ
  RopeConfig rope_local;  // gemma3's local (sliding-window) layers
  ModelLora lora;          // adapters and the adapted matmul
  bool kv_ready = false;
  KvTypes kv_types;  // the element types init_kv_cache asked for
  // The KV block the inert rows of padded steps write (one past the caller's blocks), or -1
  // when the backend pads no step (Backend::recorded_rows).
  int pad_block = -1;
  int block_size = 0;

  // `plan` with inert rows appended up to `rows` rows (each: token 0 at position 0 of its own
  // one-block sequence in pad_block, a logit row) and `draws` with a greedy draw of each.
  void pad_step(StepPlan& plan, std::vector<SampleRequest>& draws, int64_t rows) const;
  // True unless an MoE layer would read its router's logits back for a step of `rows` tokens
  // (moe_ffn.h): such a step can be neither recorded nor padded.
  bool moe_routes_on_device(int64_t rows) const;

  // Activations, [max_tokens x width] each.
  Tensor x;      // residual stream
  Tensor xn;     // normed input of a sub-block, then its output before the residual add
  Tensor q, k, v, att;
  Tensor gate, up;
  std::unique_ptr<MoeFfn> moe;  // the MoE FFN and its output, when cfg.n_experts > 0
  Tensor moe_out;
  Tensor lx;      // rows that need logits, gathered (then normed into xn)
  Tensor logits;  // [backend's logits_chunk_rows x vocab]: the LM head runs over this many rows
                  // at a time, so the buffer stays small however large the batch

  // Layer l over n tokens. `residual` is the previous sub-block's output that x has yet to
  // take (null before layer 0): each sub-block adds it as it norms x (Backend::add_rms_norm),
  // and returns its own output the same way, for the next sub-block or the end of the layers.
  const Tensor* layer(int l, int64_t n, const Tensor* residual);
  // out = W x, plus the step's adapters' updates of layer l's projection p.
  void mm(int l, LoraProj p, const Tensor& w, const Tensor& x, Tensor& out, int64_t n) {
    be->matmul(w, x, out, n);
    lora.apply(*be, l, p, x, out);
  }
  const Tensor* attention_block(int l, const LayerWeights& L, int64_t n, const Tensor* residual);
  const Tensor* ffn_block(int l, const LayerWeights& L, int64_t n, const Tensor* residual);
  // add_rms_norm(x, residual, norm) into xn, then out[j] = w[j] xn (matrices that read the same
  // input: q/k/v, gate/up, whose work on xn the backend may share) and each projection's adapters.
  template <int N>
  void norm_mm_same_x(int l, const Tensor* residual, const Tensor& norm, const LoraProj (&p)[N],
                      const Tensor* const (&w)[N], Tensor* const (&out)[N], int64_t n) {
    be->add_rms_norm_matmuls(x, residual, norm, cfg.rms_eps, xn, w, N, out, n);
    for (int j = 0; j < N; ++j) lora.apply(*be, l, p[j], xn, *out[j]);
  }
  const RopeConfig& rope_of(int l) const {
    return cfg.rope_freq_base_local > 0 && cfg.layer_window[static_cast<size_t>(l)] > 0 ? rope_local : rope;
  }
  // phi3 LongRoPE: the long factors when a sequence may grow past the original context.
  void choose_rope_factors(int n_ctx) {
    if (!cfg.rope_factors_long.empty()) rope.freq_factors = n_ctx > cfg.rope_orig_ctx ? w.rope_long : w.rope_short;
  }
  // The ops of a forward pass after its uploads: the layers over n tokens, then the LM head
  // over the n_out gathered logit rows, of which the first n_device are drawn by `draws`
  // (sorted by row) and the rest copied to host_logits, or, with host_logits null (a recorded
  // step, whose rest fits one chunk), left in `logits` for the caller to read.
  void run_ops(int64_t n, int64_t n_out, int64_t n_device, const std::vector<SampleRequest>& draws,
               float* host_logits, const std::function<void()>& begin_draws);
};

Model::Model(const gguf::GgufFile& file, std::unique_ptr<Backend> backend, int max_batch_tokens,
             const LoadProgress& on_layer)
    : impl_(std::make_unique<Impl>()) {
  if (!backend) throw std::invalid_argument("Model: no backend");
  if (max_batch_tokens <= 0) throw std::invalid_argument("Model: max_batch_tokens must be positive");
  Impl& m = *impl_;
  m.cfg = ModelConfig::from_gguf(file);
  m.be = std::move(backend);
  m.max_tokens = max_batch_tokens;
  m.w = ModelWeights::load(file, m.cfg, *m.be, on_layer);
  m.lora.init(file, m.cfg.n_layers);
  m.rope = RopeConfig{m.cfg.n_rot, m.cfg.rope_freq_base, m.cfg.rope_freq_scale, m.cfg.rope_neox,
                      m.w.rope_freqs};
  // gemma3's local layers: their own base, and no linear scaling (that is the global layers').
  m.rope_local = RopeConfig{m.cfg.n_rot, m.cfg.rope_freq_base_local, 1.0f, m.cfg.rope_neox, Tensor{}};
  m.choose_rope_factors(m.cfg.ctx_train);

  const ModelConfig& c = m.cfg;
  const int64_t T = max_batch_tokens;
  const int64_t q_dim = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  Backend& be = *m.be;
  m.x = be.alloc(T, c.dim);
  m.xn = be.alloc(T, c.dim);
  m.q = be.alloc(T, q_dim);
  m.k = be.alloc(T, kv_dim);
  m.v = be.alloc(T, kv_dim);
  m.att = be.alloc(T, q_dim);
  m.gate = be.alloc(T, c.ff_dim);
  m.up = be.alloc(T, c.ff_dim);
  if (c.n_experts > 0) {
    m.moe = std::make_unique<MoeFfn>(m.cfg, be, T);
    m.moe_out = be.alloc(T, c.dim);
  }
  m.lx = be.alloc(T, c.dim);
  const int chunk = be.logits_chunk_rows();
  if (chunk <= 0) throw std::logic_error("Model: backend gave a non-positive logits chunk");
  m.logits = be.alloc(std::min<int64_t>(T, chunk), c.vocab_size);
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
Backend& Model::backend() { return *impl_->be; }
int Model::max_batch_tokens() const { return impl_->max_tokens; }

void Model::set_context_length(int n_ctx) { impl_->choose_rope_factors(n_ctx); }

const std::vector<LoraTarget>& Model::lora_targets() const { return impl_->lora.targets(); }
void Model::set_lora(int slot, std::shared_ptr<const LoraAdapter> adapter) {
  impl_->lora.set(slot, std::move(adapter), *impl_->be);
}
void Model::clear_lora(int slot) { impl_->lora.clear(slot); }

size_t Model::kv_block_bytes(int block_size) const { return kv_block_bytes(block_size, GgmlType::F16); }

size_t Model::kv_block_bytes(int block_size, KvTypes kv_types) const {
  const ModelConfig& c = impl_->cfg;
  return impl_->be->kv_block_bytes(KvCacheConfig{c.n_layers, 1, block_size, c.n_kv_heads, c.head_dim, kv_types});
}

void Model::init_kv_cache(int num_blocks, int block_size) {
  init_kv_cache(num_blocks, block_size, GgmlType::F16);
}

// A backend that pads some step (recorded_rows(n) > n for n = 3) gets one more block, for the
// inert rows' K/V.
int Model::kv_reserved_blocks() const { return impl_->be->recorded_rows(3) > 3 ? 1 : 0; }

void Model::init_kv_cache(int num_blocks, int block_size, KvTypes kv_types) {
  const ModelConfig& c = impl_->cfg;
  // The reserved blocks follow the caller's, which stay 0..num_blocks-1.
  const int reserved = kv_reserved_blocks();
  impl_->pad_block = reserved > 0 ? num_blocks : -1;
  impl_->block_size = block_size;
  impl_->be->init_kv_cache(
      KvCacheConfig{c.n_layers, num_blocks + reserved, block_size, c.n_kv_heads, c.head_dim, kv_types});
  impl_->kv_ready = true;
  impl_->kv_types = kv_types;
}

KvTypes Model::kv_cache_types() const { return impl_->kv_types; }

const Tensor* Model::Impl::layer(int l, int64_t n, const Tensor* residual) {
  const LayerWeights& L = w.layers[static_cast<size_t>(l)];
  return ffn_block(l, L, n, attention_block(l, L, n, residual));
}

// Returns post_norm(Wo · attention(rope(norm(Wq xn)), rope(norm(Wk xn)), Wv xn)) for x to add,
// xn = rmsnorm(x + residual); the per-head Q/K norms and the post norm only where the
// architecture has them.
const Tensor* Model::Impl::attention_block(int l, const LayerWeights& L, int64_t n, const Tensor* residual) {
  Backend& b = *be;
  norm_mm_same_x(l, residual, L.attn_norm, {LoraProj::Q, LoraProj::K, LoraProj::V}, {&L.wq, &L.wk, &L.wv},
                 {&q, &k, &v}, n);
  if (cfg.qkv_bias) {
    b.add_bias(q, L.bq, n);
    b.add_bias(k, L.bk, n);
    b.add_bias(v, L.bv, n);
  }
  if (cfg.qk_norm) {
    // The activations are contiguous, so [n x heads*head_dim] is also [n*heads x head_dim]:
    // one RMSNorm row per head.
    const auto per_head = [&](Tensor& t, int heads, const Tensor& weight) {
      Tensor h{t.data, t.type, t.rows * heads, cfg.head_dim};
      b.rms_norm(h, weight, cfg.rms_eps, h, n * heads);
    };
    per_head(q, cfg.n_heads, L.q_norm);
    per_head(k, cfg.n_kv_heads, L.k_norm);
  }
  const RopeConfig& r = rope_of(l);
  b.rope_store_kv(l, q, k, v, cfg.n_heads, cfg.n_kv_heads, r);
  const int window = cfg.layer_window[static_cast<size_t>(l)];
  // phi3's LongRoPE attention factor scales both rotated Q and K (llama.cpp's rope mscale).
  const float scale = cfg.attn_scale * cfg.rope_attn_factor * cfg.rope_attn_factor;
  if (window > 0 || cfg.attn_softcap > 0)
    b.attention_ext(l, q, att, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, scale,
                    AttentionExtras{window, cfg.attn_softcap});
  else
    b.attention(l, q, att, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, scale);
  mm(l, LoraProj::O, L.wo, att, xn, n);
  if (cfg.post_norms) b.rms_norm(xn, L.post_attn_norm, cfg.rms_eps, xn, n);
  return &xn;
}

// Returns post_norm(Wdown · (act(Wgate xn) * Wup xn)) for x to add, xn = rmsnorm(x + residual);
// act = SiLU or tanh-GELU.
const Tensor* Model::Impl::ffn_block(int l, const LayerWeights& L, int64_t n, const Tensor* residual) {
  Backend& b = *be;
  if (moe) {  // the experts' FFN of xn (engine/model/moe_ffn.h)
    b.add_rms_norm(x, residual, L.ffn_norm, cfg.rms_eps, xn, n);
    moe->forward(L.moe, xn, moe_out, n);
    return &moe_out;
  }
  norm_mm_same_x(l, residual, L.ffn_norm, {LoraProj::Gate, LoraProj::Up}, {&L.w_gate, &L.w_up}, {&gate, &up}, n);
  if (cfg.gelu_ffn) b.gelu_mul(gate, up, gate, n);
  else b.silu_mul(gate, up, gate, n);
  mm(l, LoraProj::Down, L.w_down, gate, xn, n);
  if (cfg.post_norms) b.rms_norm(xn, L.post_ffn_norm, cfg.rms_eps, xn, n);
  return &xn;
}

bool Model::Impl::moe_routes_on_device(int64_t rows) const {
  if (!moe) return true;
  for (const LayerWeights& L : w.layers)
    if (!moe->on_device(L.moe, rows)) return false;
  return true;
}

void Model::Impl::pad_step(StepPlan& plan, std::vector<SampleRequest>& draws, int64_t rows) const {
  const int64_t n_out = static_cast<int64_t>(plan.logit_rows.size());
  for (int64_t t = plan.n_tokens(), k = 0; t < rows; ++t, ++k) {
    SeqInStep s;
    s.seq_id = ~uint64_t{0} - static_cast<uint64_t>(k);
    s.first_token = static_cast<int32_t>(t);
    s.n_tokens = 1;
    s.block_table_offset = static_cast<int32_t>(plan.block_tables.size());
    s.n_blocks = 1;
    plan.block_tables.push_back(pad_block);
    plan.tokens.push_back(0);
    plan.positions.push_back(0);
    plan.slots.push_back(pad_block * block_size);  // all inert rows write the same K/V there
    plan.token_seq.push_back(static_cast<int32_t>(plan.seqs.size()));
    plan.seqs.push_back(s);
    plan.logit_rows.push_back(static_cast<int32_t>(t));
    SampleRequest d;  // greedy, no logprobs: the fused LM-head argmax may take it
    d.row = static_cast<int32_t>(n_out + k);
    draws.push_back(d);
  }
}

void Model::Impl::run_ops(int64_t n, int64_t n_out, int64_t n_device, const std::vector<SampleRequest>& draws,
                          float* host_logits, const std::function<void()>& begin_draws) {
  Backend& b = *be;
  b.embed(w.tok_embd, x);
  if (cfg.embed_scale != 1.0f) b.scale(x, cfg.embed_scale, n);
  const Tensor* residual = nullptr;
  for (int l = 0; l < cfg.n_layers; ++l) residual = layer(l, n, residual);
  if (residual) b.add(x, *residual, n);
  if (n_out == 0) return;

  // Only the rows that are sampled go through the final norm and the LM head.
  b.gather_logit_rows(x, lx);
  b.rms_norm(lx, w.output_norm, cfg.rms_eps, xn, n_out);
  if (begin_draws) begin_draws();
  // Greedy draws may skip the logits (the backend's argmax in the LM head's epilogue) where the
  // logits are the plain product: no adapter on the head, no final softcap (whose rounding can
  // merge logits into ties).
  const bool plain_head = !lora.active() && cfg.final_softcap <= 0;
  size_t next_draw = 0;
  for (int64_t first = 0; first < n_device; first += logits.rows) {
    const int64_t rows = std::min<int64_t>(logits.rows, n_device - first);
    size_t end = next_draw;
    while (end < draws.size() && draws[end].row < first + rows) ++end;
    const auto first_draw = static_cast<int64_t>(next_draw), n_draws = static_cast<int64_t>(end - next_draw);
    next_draw = end;
    if (plain_head && b.sample_greedy_matmul(w.output, row_view(xn, first, rows), rows, first, first_draw, n_draws))
      continue;
    b.matmul(w.output, row_view(xn, first, rows), logits, rows);
    lora.apply_head(b, row_view(xn, first, rows), logits, first, rows);
    if (cfg.final_softcap > 0) b.softcap(logits, cfg.final_softcap, rows);
    b.sample(logits, first, first_draw, n_draws);
  }
  for (int64_t first = n_device; first < n_out; first += logits.rows) {
    const int64_t rows = std::min<int64_t>(logits.rows, n_out - first);
    b.matmul(w.output, row_view(xn, first, rows), logits, rows);
    lora.apply_head(b, row_view(xn, first, rows), logits, first, rows);
    if (cfg.final_softcap > 0) b.softcap(logits, cfg.final_softcap, rows);
    if (host_logits) b.read(logits, rows, host_logits + (first - n_device) * cfg.vocab_size);
  }
}

std::span<const float> StepLogits::host_row(int logit_row) const {
  if (logit_row < 0 || static_cast<size_t>(logit_row) >= place_.size())
    throw std::out_of_range("StepLogits: logit row " + std::to_string(logit_row) + " is outside the step");
  const int32_t place = place_[static_cast<size_t>(logit_row)];
  if (place < 0)
    throw std::out_of_range("StepLogits: logit row " + std::to_string(logit_row) + " was drawn on the backend");
  return {logits_.data() + static_cast<size_t>(place) * static_cast<size_t>(vocab_), static_cast<size_t>(vocab_)};
}

std::span<const float> StepLogits::hidden_row(int i) const {
  if (i < 0 || dim_ <= 0 || static_cast<size_t>(i) >= hidden_.size() / static_cast<size_t>(dim_))
    throw std::out_of_range("StepLogits: hidden row " + std::to_string(i) + " is outside the step");
  return {hidden_.data() + static_cast<size_t>(i) * static_cast<size_t>(dim_), static_cast<size_t>(dim_)};
}

void Model::forward(const StepPlan& plan, std::vector<float>& logits) {
  // With no draws every row is a host row, in logit-row order. The swaps lend the caller's
  // buffer (and its capacity) to the pass.
  StepLogits out;
  out.logits_.swap(logits);
  forward(plan, {}, out);
  logits.swap(out.logits_);
}

void Model::forward(const StepPlan& plan, const std::vector<SampleRequest>& draws, StepLogits& out,
                    const std::function<void()>& before_draws) {
  Impl& m = *impl_;
  if (!m.kv_ready) throw std::logic_error("Model::forward: init_kv_cache was not called");
  const int64_t n = plan.n_tokens();
  if (n > m.max_tokens)
    throw std::invalid_argument("Model::forward: " + std::to_string(n) + " tokens exceed max_batch_tokens " +
                                std::to_string(m.max_tokens));
  for (int32_t t : plan.tokens)
    if (t < 0 || t >= m.cfg.vocab_size)
      throw std::invalid_argument("Model::forward: token id " + std::to_string(t) + " is outside the vocabulary");
  for (int32_t r : plan.hidden_rows)
    if (r < 0 || r >= n)
      throw std::invalid_argument("Model::forward: hidden row " + std::to_string(r) + " is outside the step");
  Backend& b = *m.be;
  const int64_t n_out = static_cast<int64_t>(plan.logit_rows.size());
  if (!draws.empty() && !b.can_sample())
    throw std::logic_error("Model::forward: backend '" + b.name() + "' cannot sample");
  // The logit rows some draw reads (drawn on the backend).
  std::vector<char> on_device(static_cast<size_t>(n_out), 0);
  for (const SampleRequest& d : draws) {
    if (d.row < 0 || d.row >= n_out)
      throw std::invalid_argument("Model::forward: draw of logit row " + std::to_string(d.row) + " of " +
                                  std::to_string(n_out));
    on_device[static_cast<size_t>(d.row)] = 1;
  }
  const int64_t n_device = static_cast<int64_t>(std::count(on_device.begin(), on_device.end(), 1));
  // Row buckets: a decode-only step whose every token is a logit row drawn on the backend (no
  // token tree, no host rows) runs padded to the backend's bucket, then its own rows are kept.
  if (m.pad_block >= 0 && n > 0 && n_device == n && n_out == n && plan.hidden_rows.empty() && !plan.has_tree()) {
    const int64_t rows = b.recorded_rows(n);
    bool eligible = rows > n && rows <= m.max_tokens && rows <= m.logits.rows && m.moe_routes_on_device(rows);
    for (const SeqInStep& s : plan.seqs) eligible = eligible && s.n_tokens == 1 && s.lora == 0;
    if (eligible) {
      StepPlan padded = plan;
      std::vector<SampleRequest> padded_draws = draws;
      m.pad_step(padded, padded_draws, rows);
      forward(padded, padded_draws, out, before_draws);
      out.ids_.resize(draws.size());
      out.logprobs_.resize(draws.size());
      out.place_.resize(static_cast<size_t>(n_out));
      return;
    }
  }

  // The LM head's row order: rows some draw reads first, then the host rows, each in plan
  // order. pos[r] is logit row r's place in it.
  std::vector<int32_t> order;  // LM-head place -> logit row
  order.reserve(static_cast<size_t>(n_out));
  for (int pass = 1; pass >= 0; --pass)
    for (int32_t r = 0; r < n_out; ++r)
      if (on_device[static_cast<size_t>(r)] == pass) order.push_back(r);
  std::vector<int32_t> pos(static_cast<size_t>(n_out));
  bool reordered = false;
  for (size_t k = 0; k < order.size(); ++k) {
    pos[static_cast<size_t>(order[k])] = static_cast<int32_t>(k);
    reordered |= order[k] != static_cast<int32_t>(k);
  }
  StepPlan reordered_plan;
  if (reordered) {
    reordered_plan = plan;
    for (size_t k = 0; k < order.size(); ++k)
      reordered_plan.logit_rows[k] = plan.logit_rows[static_cast<size_t>(order[k])];
  }
  // Draws sorted by their row's place (stable: equal rows keep their order), rows renumbered.
  std::vector<size_t> by_place(draws.size());
  for (size_t i = 0; i < by_place.size(); ++i) by_place[i] = i;
  std::stable_sort(by_place.begin(), by_place.end(), [&](size_t a, size_t c) {
    return pos[static_cast<size_t>(draws[a].row)] < pos[static_cast<size_t>(draws[c].row)];
  });
  std::vector<SampleRequest> sorted(draws.size());
  for (size_t k = 0; k < sorted.size(); ++k) {
    sorted[k] = draws[by_place[k]];
    sorted[k].row = pos[static_cast<size_t>(sorted[k].row)];
  }

  // Rows grouped by adapter (throws for a slot that holds none) before the backend sees the plan.
  const bool adapted = m.lora.begin_step(plan, order);
  b.begin_step(reordered ? reordered_plan : plan);  // validates the plan's indices against the cache
  if (m.cfg.rope_freq_base_local > 0) {  // gemma3: local layers shift with their own RoPE
    std::vector<RopeConfig> per_layer;
    for (int l = 0; l < m.cfg.n_layers; ++l) per_layer.push_back(m.rope_of(l));
    b.apply_cache_edits_per_layer(per_layer);
  } else {
    b.apply_cache_edits(m.rope);
  }
  const int64_t vocab = m.cfg.vocab_size;
  out.vocab_ = vocab;
  out.place_.resize(static_cast<size_t>(n_out));
  for (size_t r = 0; r < out.place_.size(); ++r)
    out.place_[r] = on_device[r] ? -1 : pos[r] - static_cast<int32_t>(n_device);
  out.logits_.assign(static_cast<size_t>((n_out - n_device) * vocab), 0.0f);
  out.ids_.assign(draws.size(), 0);
  out.logprobs_.assign(draws.size(), DrawLogprobs{});
  out.dim_ = m.cfg.dim;
  out.hidden_.assign(plan.hidden_rows.size() * static_cast<size_t>(m.cfg.dim), 0.0f);
  if (n == 0) return;
  // With the drawn rows in one LM-head chunk and the host rows (prompt logprob rows, say)
  // in one more, the ops depend only on the step's shape, so the backend may record them once
  // and replay them (CUDA graphs); the host rows' logits are read back after the recorded ops.
  // An MoE step is recorded only where every layer routes on the backend (moe_ffn.h); else it
  // reads router logits back mid-step. A step with adapters launches per adapter group: never
  // recorded.
  const int64_t n_host = n_out - n_device;
  const bool recordable = m.moe_routes_on_device(n) && !adapted && n_out > 0 && n_device <= m.logits.rows &&
                          n_host <= m.logits.rows && plan.hidden_rows.empty();
  // The draws go up before the layers (the upload overlaps them), or, when the caller has host
  // work to finish first and the step is not recorded, once the layers are issued.
  const auto begin_draws = [&] {
    if (before_draws) before_draws();
    b.begin_sampling(sorted);
  };
  const bool late_draws = before_draws && !recordable && !sorted.empty();
  if (!sorted.empty() && !late_draws) begin_draws();
  if (!(recordable && b.replay_recorded())) {
    m.run_ops(n, n_out, n_device, sorted, recordable ? nullptr : out.logits_.data(),
              late_draws ? std::function<void()>(begin_draws) : nullptr);
    if (recordable) b.end_recordable();
  }
  if (recordable && n_host > 0) b.read(m.logits, n_host, out.logits_.data());
  if (!plan.hidden_rows.empty()) {
    // The final norm over the whole step (the LM head is done with xn), read back, and the
    // rows asked for picked out: a step's worth of norms is small beside its layers.
    b.rms_norm(m.x, m.w.output_norm, m.cfg.rms_eps, m.xn, n);
    const size_t dim = static_cast<size_t>(m.cfg.dim);
    out.normed_.resize(static_cast<size_t>(n) * dim);
    b.read(m.xn, n, out.normed_.data());
    for (size_t i = 0; i < plan.hidden_rows.size(); ++i)
      std::copy_n(out.normed_.data() + static_cast<size_t>(plan.hidden_rows[i]) * dim, dim,
                  out.hidden_.data() + i * dim);
  }
  if (!sorted.empty()) {
    std::vector<int32_t> got(sorted.size());
    std::vector<DrawLogprobs> got_lp(sorted.size());
    b.finish_sampling(got.data(), got_lp.data());
    for (size_t k = 0; k < got.size(); ++k) {
      out.ids_[by_place[k]] = got[k];
      out.logprobs_[by_place[k]] = got_lp[k];
    }
  }
}

}  // namespace pagoda
