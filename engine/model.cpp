#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/gguf.h"
#include "engine/model_weights.h"

namespace pagoda {
namespace {

// The LM head runs over at most this many logit rows at a time, so the logits buffer stays
// small (vocab x 64 floats) however large the batch.
constexpr int kLogitChunk = 64;

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
  RopeConfig rope;
  bool kv_ready = false;

  // Activations, [max_tokens x width] each.
  Tensor x;      // residual stream
  Tensor xn;     // normed input of a sub-block, then its output before the residual add
  Tensor q, k, v, att;
  Tensor gate, up;
  Tensor lx;      // rows that need logits, gathered (then normed into xn)
  Tensor logits;  // [kLogitChunk x vocab]

  void layer(int l, int64_t n);
};

Model::Model(const gguf::GgufFile& file, std::unique_ptr<Backend> backend, int max_batch_tokens)
    : impl_(std::make_unique<Impl>()) {
  if (!backend) throw std::invalid_argument("Model: no backend");
  if (max_batch_tokens <= 0) throw std::invalid_argument("Model: max_batch_tokens must be positive");
  Impl& m = *impl_;
  m.cfg = ModelConfig::from_gguf(file);
  m.be = std::move(backend);
  m.max_tokens = max_batch_tokens;
  m.w = ModelWeights::load(file, m.cfg, *m.be);
  m.rope = RopeConfig{m.cfg.n_rot, m.cfg.rope_freq_base, m.cfg.rope_freq_scale, m.cfg.rope_neox,
                      m.w.rope_freqs};

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
  m.lx = be.alloc(T, c.dim);
  m.logits = be.alloc(std::min<int64_t>(T, kLogitChunk), c.vocab_size);
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
Backend& Model::backend() { return *impl_->be; }
int Model::max_batch_tokens() const { return impl_->max_tokens; }

size_t Model::kv_block_bytes(int block_size) const {
  const ModelConfig& c = impl_->cfg;
  return impl_->be->kv_block_bytes(KvCacheConfig{c.n_layers, 1, block_size, c.n_kv_heads, c.head_dim});
}

size_t Model::kv_block_bytes(int block_size, GgmlType kv_type) const {
  const ModelConfig& c = impl_->cfg;
  return impl_->be->kv_block_bytes(KvCacheConfig{c.n_layers, 1, block_size, c.n_kv_heads, c.head_dim, kv_type});
}

void Model::init_kv_cache(int num_blocks, int block_size) {
  init_kv_cache(num_blocks, block_size, GgmlType::F16);
}

void Model::init_kv_cache(int num_blocks, int block_size, GgmlType kv_type) {
  const ModelConfig& c = impl_->cfg;
  impl_->be->init_kv_cache(KvCacheConfig{c.n_layers, num_blocks, block_size, c.n_kv_heads, c.head_dim, kv_type});
  impl_->kv_ready = true;
}

void Model::Impl::layer(int l, int64_t n) {
  const LayerWeights& L = w.layers[static_cast<size_t>(l)];
  Backend& b = *be;
  // Attention block: x += Wo · attention(rope(Wq xn), rope(Wk xn), Wv xn), xn = rmsnorm(x).
  b.rms_norm(x, L.attn_norm, cfg.rms_eps, xn, n);
  b.matmul(L.wq, xn, q, n);
  b.matmul(L.wk, xn, k, n);
  b.matmul(L.wv, xn, v, n);
  if (cfg.qkv_bias) {
    b.add_bias(q, L.bq, n);
    b.add_bias(k, L.bk, n);
    b.add_bias(v, L.bv, n);
  }
  b.rope(q, cfg.n_heads, rope);
  b.rope(k, cfg.n_kv_heads, rope);
  b.store_kv(l, k, v);
  b.attention(l, q, att, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
              1.0f / std::sqrt(static_cast<float>(cfg.head_dim)));
  b.matmul(L.wo, att, xn, n);
  b.add(x, xn, n);
  // Feed-forward block: x += Wdown · (silu(Wgate xn) * Wup xn), xn = rmsnorm(x).
  b.rms_norm(x, L.ffn_norm, cfg.rms_eps, xn, n);
  b.matmul(L.w_gate, xn, gate, n);
  b.matmul(L.w_up, xn, up, n);
  b.silu_mul(gate, up, gate, n);
  b.matmul(L.w_down, gate, xn, n);
  b.add(x, xn, n);
}

void Model::forward(const StepPlan& plan, std::vector<float>& logits) {
  Impl& m = *impl_;
  if (!m.kv_ready) throw std::logic_error("Model::forward: init_kv_cache was not called");
  const int64_t n = plan.n_tokens();
  if (n > m.max_tokens)
    throw std::invalid_argument("Model::forward: " + std::to_string(n) + " tokens exceed max_batch_tokens " +
                                std::to_string(m.max_tokens));
  for (int32_t t : plan.tokens)
    if (t < 0 || t >= m.cfg.vocab_size)
      throw std::invalid_argument("Model::forward: token id " + std::to_string(t) + " is outside the vocabulary");

  Backend& b = *m.be;
  b.begin_step(plan);  // validates the plan's indices against the cache
  b.apply_cache_edits(m.rope);
  const int64_t n_out = static_cast<int64_t>(plan.logit_rows.size());
  logits.assign(static_cast<size_t>(n_out) * m.cfg.vocab_size, 0.0f);
  if (n == 0) return;

  b.embed(m.w.tok_embd, m.x);
  for (int l = 0; l < m.cfg.n_layers; ++l) m.layer(l, n);
  if (n_out == 0) return;

  // Only the rows that are sampled go through the final norm and the LM head.
  b.gather_logit_rows(m.x, m.lx);
  b.rms_norm(m.lx, m.w.output_norm, m.cfg.rms_eps, m.xn, n_out);
  for (int64_t first = 0; first < n_out; first += m.logits.rows) {
    const int64_t rows = std::min<int64_t>(m.logits.rows, n_out - first);
    b.matmul(m.w.output, row_view(m.xn, first, rows), m.logits, rows);
    b.read(m.logits, rows, logits.data() + first * m.cfg.vocab_size);
  }
}

}  // namespace pagoda
