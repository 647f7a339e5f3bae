// BertModel: embeddings + LayerNorm, post-norm layers (biased projections, bidirectional
// softmax attention, tanh-approximated GELU as llama.cpp's ggml_gelu), pooling, normalization;
// for nomic-bert rotary Q/K (NeoX halves), a fused QKV, SwiGLU and no matrix biases; the
// classification head of rerankers.
#include "engine/encoder/bert_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/matmul.h"
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
  for (int64_t i = 0; i < n; ++i) {
    float* row = x.data() + i * d;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += row[j];
    mean /= double(d);
    for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= double(d);
    const float inv = float(1.0 / std::sqrt(var + eps));
    for (int64_t j = 0; j < d; ++j) row[j] = float(row[j] - mean) * inv * f32(g)[j] + f32(b)[j];
  }
}

float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// Rotates each head of the [n x d] rows of x by position (row index), NeoX style: dimension i
// pairs with i + hd/2, pair i turning by pos * base^(-2i/hd).
void rope_neox(std::vector<float>& x, int64_t n, int64_t d, int64_t hd, float base) {
  const int64_t half = hd / 2;
  for (int64_t pos = 0; pos < n; ++pos)
    for (int64_t h = 0; h < d / hd; ++h) {
      float* v = x.data() + pos * d + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double theta = double(pos) * std::pow(double(base), -2.0 * double(i) / double(hd));
        const float c = float(std::cos(theta)), s = float(std::sin(theta));
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = a * s + b * c;
      }
    }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

BertModel::BertModel(const gguf::GgufFile& file, int threads)
    : config_(BertConfig::from_gguf(file)), pool_(std::make_unique<cpu::ThreadPool>(threads)) {}

BertModel::~BertModel() = default;

std::vector<float> BertModel::hidden_states(const std::vector<int32_t>& tokens, int segment_b) const {
  const BertConfig& c = config_;
  const int64_t n = int64_t(tokens.size()), d = c.dim, hd = d / c.n_heads;
  if (n == 0) throw EncoderError("an encoder input needs at least one token");
  if (n > c.ctx)
    throw EncoderError("input of " + std::to_string(n) + " tokens exceeds the model's context of " +
                       std::to_string(c.ctx));
  std::vector<float> x(static_cast<size_t>(n * d)), tmp(static_cast<size_t>(d)), type0(static_cast<size_t>(d)),
      type1;
  read_row(c.type_embd, 0, type0.data());
  if (c.n_types >= 2 && segment_b >= 0) {  // the second text of a pair
    type1.resize(size_t(d));
    read_row(c.type_embd, 1, type1.data());
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw EncoderError("token id " + std::to_string(tokens[i]) + " is outside the vocabulary");
    float* row = x.data() + i * d;
    read_row(c.tok_embd, tokens[i], row);
    if (c.pos_embd.data != nullptr) {  // absolute positions (bert); nomic-bert rotates Q and K instead
      read_row(c.pos_embd, i, tmp.data());
      for (int64_t j = 0; j < d; ++j) row[j] += tmp[j];
    }
    const std::vector<float>& type = !type1.empty() && i >= segment_b ? type1 : type0;
    for (int64_t j = 0; j < d; ++j) row[j] += type[j];
  }
  layer_norm(x, n, d, c.embd_norm, c.embd_norm_b, c.eps);

  std::vector<float> q, k, v, qkv, attn(static_cast<size_t>(n * d)), o, up, gate, down;
  const float scale = 1.0f / std::sqrt(float(hd));
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
    if (c.arch == EncoderArch::NomicBert) {
      rope_neox(q, n, d, hd, c.rope_freq_base);
      rope_neox(k, n, d, hd, c.rope_freq_base);
    }
    pool_->parallel_for(int64_t(c.n_heads) * n, [&](int64_t b, int64_t e, int) {
      std::vector<float> s(static_cast<size_t>(n));
      for (int64_t t = b; t < e; ++t) {
        const int64_t h = t / n, i = t % n;
        const float* qi = q.data() + i * d + h * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const float* kj = k.data() + j * d + h * hd;
          float dot = 0;
          for (int64_t u = 0; u < hd; ++u) dot += qi[u] * kj[u];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
        float* out = attn.data() + i * d + h * hd;
        std::fill(out, out + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          const float p = s[j] / sum;
          const float* vj = v.data() + j * d + h * hd;
          for (int64_t u = 0; u < hd; ++u) out[u] += p * vj[u];
        }
      }
    });
    linear(*pool_, L.o, L.o_b, attn, n, o);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    layer_norm(x, n, d, L.attn_norm, L.attn_norm_b, c.eps);
    linear(*pool_, L.up, L.up_b, x, n, up);
    if (L.gate.data != nullptr) {  // SwiGLU
      linear(*pool_, L.gate, WeightRef{}, x, n, gate);
      for (size_t i = 0; i < up.size(); ++i) up[i] *= silu(gate[i]);
    } else {
      for (float& u : up) u = gelu(u);
    }
    linear(*pool_, L.down, L.down_b, up, n, down);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
    layer_norm(x, n, d, L.out_norm, L.out_norm_b, c.eps);
  }
  return x;
}

std::vector<float> BertModel::embed(const std::vector<int32_t>& tokens, int segment_b) const {
  const std::vector<float> h = hidden_states(tokens, segment_b);
  const int64_t n = int64_t(tokens.size()), d = config_.dim;
  std::vector<float> out(static_cast<size_t>(d), 0.0f);
  if (config_.pooling == Pooling::Rank) {
    std::vector<float> x(h.begin(), h.begin() + d), y;
    if (config_.cls.data != nullptr) {  // dense + tanh
      linear(*pool_, config_.cls, config_.cls_b, x, 1, y);
      for (float& e : y) e = std::tanh(e);
      x.swap(y);
    }
    if (config_.cls_out.data != nullptr) {
      linear(*pool_, config_.cls_out, config_.cls_out_b, x, 1, y);
      x.swap(y);
    }
    return x;
  }
  if (config_.pooling == Pooling::Cls) {
    std::copy(h.begin(), h.begin() + d, out.begin());
  } else {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) out[j] += h[size_t(i * d + j)];
    for (float& e : out) e /= float(n);
  }
  double norm = 0;
  for (float e : out) norm += double(e) * e;
  if (norm > 0)
    for (float& e : out) e = float(e / std::sqrt(norm));
  return out;
}

}  // namespace pagoda::encoder
