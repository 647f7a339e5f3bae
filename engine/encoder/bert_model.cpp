// BertModel: embeddings + LayerNorm, post-norm layers (biased projections, bidirectional
// softmax attention within each input, tanh-approximated GELU as llama.cpp's ggml_gelu),
// pooling, normalization; for nomic-bert rotary Q/K (NeoX halves), a fused QKV, SwiGLU and no
// matrix biases; the classification head of rerankers. A batch's rows are stacked for every
// row-wise step; positions restart at each input.
#include "engine/encoder/bert_model.h"

#include "engine/encoder/bert_backend.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/encoder_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/ops_window_softcap.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/ggml_type.h"

namespace pagoda::encoder {

namespace {

const float* f32(const WeightRef& w) { return static_cast<const float*>(w.data); }

// Row r of w as floats.
void read_row(const WeightRef& w, int64_t r, float* out) {
  const auto* base = static_cast<const uint8_t*>(w.data) + ggml_row_size(w.type, w.cols) * size_t(r);
  cpu::dequantize_row(w.type, base, out, w.cols);
}

// y[n x rows] = x[n x cols] * w^T + b (no bias when b has no data).
void linear(cpu::ThreadPool& pool, const WeightRef& w, const WeightRef& b, const std::vector<float>& x, int64_t n,
            std::vector<float>& y) {
  y.resize(size_t(n * w.rows));
  cpu::matmul(pool, w.type, w.data, w.rows, w.cols, x.data(), n, y.data());
  const float* bias = f32(b);
  if (bias == nullptr) return;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < w.rows; ++o) y[size_t(i * w.rows + o)] += bias[o];
}

// Each row of x [n x d]: (x - mean) / sqrt(var + eps) * g + b.
void layer_norm(std::vector<float>& x, int64_t n, int64_t d, const WeightRef& g, const WeightRef& b, float eps) {
  cpu::layer_norm_rows(x.data(), n, d, f32(g), f32(b), eps, x.data());
}

// fn(at, len) over the n rows of width w of a buffer, in whole rows, spread over the pool.
template <class Fn>
void rows_in_parallel(cpu::ThreadPool& pool, int64_t n, int64_t w, Fn&& fn) {
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) { fn(b * w, (e - b) * w); });
}

// Rotates each head of one input's [n x d] rows x by position (the row index), NeoX style:
// dimension i pairs with i + hd/2, pair i turning by pos * base^(-2i/hd).
void rope_neox(float* x, int64_t n, int64_t d, int64_t hd, float base) {
  const int64_t half = hd / 2;
  for (int64_t pos = 0; pos < n; ++pos)
    for (int64_t h = 0; h < d / hd; ++h) {
      float* v = x + pos * d + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = double(pos) * std::pow(double(base), -2.0 * double(i) / double(hd));
        const float c = float(std::cos(theta)), s = float(std::sin(theta));
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = a * s + b * c;
      }
    }
}

}  // namespace

struct BertModel::Scratch {
  std::vector<float> q, k, v, qkv, attn, o, up, gate, down, ones;
};

BertModel::BertModel(const gguf::GgufFile& file, int threads, std::unique_ptr<Backend> backend, int64_t max_rows)
    : config_(BertConfig::from_gguf(file)),
      pool_(std::make_unique<cpu::ThreadPool>(threads)),
      scratch_(std::make_unique<Scratch>()) {
  if (backend)
    backend_ = std::make_unique<BertBackendForward>(config_, std::move(backend), std::max<int64_t>(max_rows, config_.ctx));
}

BertModel::~BertModel() = default;

std::string BertModel::check_input(const std::vector<int32_t>& tokens) const {
  const BertConfig& c = config_;
  if (tokens.empty()) return "an encoder input needs at least one token";
  if (int64_t(tokens.size()) > c.ctx)
    return "input of " + std::to_string(tokens.size()) + " tokens exceeds the model's context of " +
           std::to_string(c.ctx);
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab_size) return "token id " + std::to_string(t) + " is outside the vocabulary";
  return {};
}

std::vector<float> BertModel::hidden_states(const std::vector<int32_t>& tokens, int segment_b) const {
  return hidden_states_batch({EncoderInput{tokens, segment_b}});
}

std::vector<float> BertModel::embedded_rows(const std::vector<EncoderInput>& inputs,
                                           const std::vector<int64_t>& starts) const {
  const BertConfig& c = config_;
  const int64_t d = c.dim;
  std::vector<float> x(static_cast<size_t>(starts.back() * d)), tmp(static_cast<size_t>(d)),
      type0(static_cast<size_t>(d)), type1;
  read_row(c.type_embd, 0, type0.data());
  if (c.n_types >= 2) {  // the second text of a pair
    type1.resize(size_t(d));
    read_row(c.type_embd, 1, type1.data());
  }
  for (size_t b = 0; b < inputs.size(); ++b) {
    const EncoderInput& in = inputs[b];
    for (int64_t i = 0; i < int64_t(in.tokens.size()); ++i) {
      float* row = x.data() + (starts[b] + i) * d;
      read_row(c.tok_embd, in.tokens[size_t(i)], row);
      if (c.pos_embd.data != nullptr) {  // absolute positions (bert); nomic-bert rotates Q and K instead
        read_row(c.pos_embd, i, tmp.data());
        for (int64_t j = 0; j < d; ++j) row[j] += tmp[j];
      }
      const std::vector<float>& type = !type1.empty() && in.segment_b >= 0 && i >= in.segment_b ? type1 : type0;
      for (int64_t j = 0; j < d; ++j) row[j] += type[j];
    }
  }
  return x;
}

std::vector<float> BertModel::hidden_states_batch(const std::vector<EncoderInput>& inputs) const {
  const BertConfig& c = config_;
  const int64_t d = c.dim, hd = d / c.n_heads;
  std::vector<int64_t> starts{0};
  for (size_t b = 0; b < inputs.size(); ++b) {
    const std::string bad = check_input(inputs[b].tokens);
    if (!bad.empty()) throw EncoderError(inputs.size() == 1 ? bad : "input " + std::to_string(b) + ": " + bad);
    starts.push_back(starts.back() + int64_t(inputs[b].tokens.size()));
  }
  const int64_t n = starts.back();
  if (backend_) return backend_hidden_states(inputs, starts);
  std::vector<float> x = embedded_rows(inputs, starts);
  layer_norm(x, n, d, c.embd_norm, c.embd_norm_b, c.eps);

  std::lock_guard<std::mutex> lock(scratch_mu_);
  Scratch& sc = *scratch_;
  std::vector<float>&q = sc.q, &k = sc.k, &v = sc.v, &qkv = sc.qkv, &attn = sc.attn, &o = sc.o, &up = sc.up,
                     &gate = sc.gate, &down = sc.down, &ones = sc.ones;
  attn.resize(size_t(n * d));
  for (const BertLayer& L : c.layers) {
    if (L.qkv.data != nullptr) {
      linear(*pool_, L.qkv, WeightRef{}, x, n, qkv);
      q.resize(x.size()), k.resize(x.size()), v.resize(x.size());
      for (int64_t i = 0; i < n; ++i) {
        const float* row = qkv.data() + i * 3 * d;
        std::copy(row, row + d, q.data() + i * d);
        std::copy(row + d, row + 2 * d, k.data() + i * d);
        std::copy(row + 2 * d, row + 3 * d, v.data() + i * d);
      }
    } else {
      linear(*pool_, L.q, L.q_b, x, n, q);
      linear(*pool_, L.k, L.k_b, x, n, k);
      linear(*pool_, L.v, L.v_b, x, n, v);
    }
    if (c.arch == EncoderArch::NomicBert)
      for (size_t b = 0; b + 1 < starts.size(); ++b) {
        rope_neox(q.data() + starts[b] * d, starts[b + 1] - starts[b], d, hd, c.rope_freq_base);
        rope_neox(k.data() + starts[b] * d, starts[b + 1] - starts[b], d, hd, c.rope_freq_base);
      }
    cpu::encoder_attention(*pool_, starts, c.n_heads, int(hd), q.data(), k.data(), v.data(), attn.data());
    linear(*pool_, L.o, L.o_b, attn, n, o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    layer_norm(x, n, d, L.attn_norm, L.attn_norm_b, c.eps);
    linear(*pool_, L.up, L.up_b, x, n, up);
    if (L.gate.data != nullptr) {  // SwiGLU
      linear(*pool_, L.gate, WeightRef{}, x, n, gate);
      rows_in_parallel(*pool_, n, L.up.rows, [&](int64_t at, int64_t len) {
        cpu::silu_mul_row(gate.data() + at, up.data() + at, up.data() + at, len);
      });
    } else {
      if (ones.size() < size_t(L.up.rows)) ones.assign(size_t(L.up.rows), 1.0f);
      rows_in_parallel(*pool_, n, L.up.rows, [&](int64_t at, int64_t len) {
        for (int64_t r = at; r < at + len; r += L.up.rows)
          cpu::gelu_mul_row(up.data() + r, ones.data(), up.data() + r, L.up.rows);
      });
    }
    linear(*pool_, L.down, L.down_b, up, n, down);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
    layer_norm(x, n, d, L.out_norm, L.out_norm_b, c.eps);
  }
  return x;
}

std::vector<float> BertModel::backend_hidden_states(const std::vector<EncoderInput>& inputs,
                                                   const std::vector<int64_t>& starts) const {
  std::lock_guard<std::mutex> lock(scratch_mu_);
  std::vector<float> h;
  h.reserve(size_t(starts.back() * config_.dim));
  // Passes of whole inputs within the backend's buffers (each input fits: max_rows >= ctx).
  for (size_t first = 0; first < inputs.size();) {
    size_t last = first + 1;
    while (last < inputs.size() && starts[last + 1] - starts[first] <= backend_->max_rows()) ++last;
    const std::vector<EncoderInput> pass(inputs.begin() + std::ptrdiff_t(first), inputs.begin() + std::ptrdiff_t(last));
    std::vector<int64_t> local{0};
    for (size_t b = first; b < last; ++b) local.push_back(starts[b + 1] - starts[first]);
    const std::vector<float> part = backend_->hidden_states(embedded_rows(pass, local), local);
    h.insert(h.end(), part.begin(), part.end());
    first = last;
  }
  return h;
}

std::vector<float> BertModel::embed(const std::vector<int32_t>& tokens, int segment_b) const {
  return std::move(embed_batch({EncoderInput{tokens, segment_b}}).front());
}

std::vector<std::vector<float>> BertModel::embed_batch(const std::vector<EncoderInput>& inputs) const {
  const std::vector<float> h = hidden_states_batch(inputs);
  const int64_t d = config_.dim;
  std::vector<std::vector<float>> outs;
  outs.reserve(inputs.size());
  if (config_.pooling == Pooling::Rank) {
    // The first token's state of every input, through the head together (rows stacked).
    const int64_t m = int64_t(inputs.size());
    std::vector<float> x(size_t(m * d)), y;
    int64_t row = 0;
    for (int64_t b = 0; b < m; ++b) {
      std::copy(h.begin() + row * d, h.begin() + (row + 1) * d, x.begin() + b * d);
      row += int64_t(inputs[size_t(b)].tokens.size());
    }
    int64_t width = d;
    if (config_.cls.data != nullptr) {  // dense + tanh
      linear(*pool_, config_.cls, config_.cls_b, x, m, y);
      for (float& e : y) e = std::tanh(e);
      x.swap(y);
      width = config_.cls.rows;
    }
    if (config_.cls_out.data != nullptr) {
      linear(*pool_, config_.cls_out, config_.cls_out_b, x, m, y);
      x.swap(y);
      width = config_.cls_out.rows;
    }
    for (int64_t b = 0; b < m; ++b) outs.emplace_back(x.begin() + b * width, x.begin() + (b + 1) * width);
    return outs;
  }
  int64_t row = 0;
  for (const EncoderInput& in : inputs) {
    const int64_t n = int64_t(in.tokens.size());
    std::vector<float> out(static_cast<size_t>(d), 0.0f);
    const float* hb = h.data() + row * d;
    if (config_.pooling == Pooling::Cls) {
      std::copy(hb, hb + d, out.begin());
    } else {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) out[size_t(j)] += hb[i * d + j];
      for (float& e : out) e /= float(n);
    }
    double norm = 0;
    for (float e : out) norm += double(e) * e;
    if (norm > 0)
      for (float& e : out) e = float(e / std::sqrt(norm));
    outs.push_back(std::move(out));
    row += n;
  }
  return outs;
}

}  // namespace pagoda::encoder
