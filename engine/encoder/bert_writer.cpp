// write_bert_model: the hyper-parameter keys and the seeded random tensors.
#include "engine/encoder/bert_writer.h"

#include <cmath>
#include <random>
#include <vector>

#include "engine/encoder/encoder_vocab.h"
#include "engine/gguf/gguf.h"
#include "kernels/cpu/quants.h"

namespace pagoda::encoder {

namespace {

// Copies every tokenizer.* key of `path`; returns the vocabulary size.
size_t copied_vocab(gguf::GgufWriter& w, const std::string& path) {
  const auto src = gguf::GgufFile::open(path);
  for (const auto& [key, value] : src.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  const auto* tokens = src.get_string_array("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->empty()) throw EncoderError(path + " has no tokenizer.ggml.tokens");
  return tokens->size();
}

}  // namespace

void write_bert_model(const BertSpec& s, const std::string& path) {
  if (s.n_layers <= 0 || s.dim <= 0 || s.ff_dim <= 0 || s.n_heads <= 0 || s.ctx <= 0 || s.dim % s.n_heads != 0)
    throw EncoderError("bert spec needs positive sizes and heads dividing dim");
  if (s.type != GgmlType::F32 && s.type != GgmlType::F16 && s.type != GgmlType::BF16 && s.dim % 32 != 0)
    throw EncoderError("quantized bert weights need dim and ff a multiple of 32");
  gguf::GgufWriter w;
  const bool nomic = s.arch == EncoderArch::NomicBert;
  if (s.xlm_roberta && nomic) throw EncoderError("xlm-roberta is a bert-architecture file");
  if (nomic && (s.dim / s.n_heads) % 2 != 0) throw EncoderError("nomic-bert needs an even head width");
  const std::string arch = nomic ? "nomic-bert" : "bert", k = arch + ".";
  w.set("general.architecture", gguf::Value::from_string(arch));
  w.set("general.name", gguf::Value::from_string(s.name));
  w.set(k + "block_count", gguf::Value::from_u32(uint32_t(s.n_layers)));
  w.set(k + "context_length", gguf::Value::from_u32(uint32_t(s.ctx)));
  w.set(k + "embedding_length", gguf::Value::from_u32(uint32_t(s.dim)));
  w.set(k + "feed_forward_length", gguf::Value::from_u32(uint32_t(s.ff_dim)));
  w.set(k + "attention.head_count", gguf::Value::from_u32(uint32_t(s.n_heads)));
  w.set(k + "attention.layer_norm_epsilon", gguf::Value::from_f32(1e-12f));
  w.set(k + "attention.causal", gguf::Value::from_bool(false));
  w.set(k + "pooling_type", gguf::Value::from_u32(uint32_t(s.pooling)));
  if (nomic) w.set(k + "rope.freq_base", gguf::Value::from_f32(1000.0f));
  const int n_types = s.xlm_roberta ? 1 : 2;
  w.set("tokenizer.ggml.token_type_count", gguf::Value::from_u32(uint32_t(n_types)));
  size_t vocab = 0;
  if (s.vocab_from.empty()) {
    vocab = s.xlm_roberta ? write_unigram_vocab(w, s.seed) : write_wordpiece_vocab(w);
  } else {
    vocab = copied_vocab(w, s.vocab_from);
  }

  std::mt19937_64 rng(s.seed);
  auto add = [&](const std::string& name, int64_t cols, int64_t rows, GgmlType type, float mean, float std) {
    std::normal_distribution<float> dist(mean, std);
    std::vector<float> values(size_t(cols * (rows > 0 ? rows : 1)));
    for (float& v : values) v = dist(rng);
    const int64_t nrows = rows > 0 ? rows : 1;
    std::vector<uint8_t> bytes(ggml_row_size(type, cols) * size_t(nrows));
    for (int64_t r = 0; r < nrows; ++r)
      cpu::quantize_row(type, values.data() + r * cols, bytes.data() + ggml_row_size(type, cols) * size_t(r), cols);
    w.add_tensor(name, rows > 0 ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols}, type, std::move(bytes));
  };
  const int64_t d = s.dim, ff = s.ff_dim;
  const float wstd = 0.3f / std::sqrt(float(d));
  add("token_embd.weight", d, int64_t(vocab), s.type, 0, 0.5f);
  // F32 whatever the matrices' type, as llama.cpp's converter keeps them (its graph adds them).
  if (!nomic) add("position_embd.weight", d, s.ctx, GgmlType::F32, 0, 0.2f);
  add("token_types.weight", d, n_types, GgmlType::F32, 0, 0.1f);
  add("token_embd_norm.weight", d, 0, GgmlType::F32, 1, 0.1f);
  add("token_embd_norm.bias", d, 0, GgmlType::F32, 0, 0.1f);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto matrix = [&](const char* m, int64_t cols, int64_t rows) {
      add(p + m + ".weight", cols, rows, s.type, 0, 3 * wstd);
      if (!nomic) add(p + m + ".bias", rows, 0, GgmlType::F32, 0, 0.1f);
    };
    auto norm = [&](const char* m) {
      add(p + m + ".weight", d, 0, GgmlType::F32, 1, 0.1f);
      add(p + m + ".bias", d, 0, GgmlType::F32, 0, 0.1f);
    };
    if (nomic) {
      matrix("attn_qkv", d, 3 * d);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) matrix(m, d, d);
    }
    matrix("attn_output", d, d);
    norm("attn_output_norm");
    if (nomic) matrix("ffn_gate", d, ff);
    matrix("ffn_up", d, ff);
    matrix("ffn_down", ff, d);
    norm("layer_output_norm");
  }
  if (s.pooling == Pooling::Rank) {
    add("cls.weight", d, d, s.type, 0, 3 * wstd);
    add("cls.bias", d, 0, GgmlType::F32, 0, 0.1f);
    add("cls.output.weight", d, 1, s.type, 0, 1.0f / std::sqrt(float(d)));
    add("cls.output.bias", 1, 0, GgmlType::F32, 0, 0.1f);
  }
  w.write(path);
}

}  // namespace pagoda::encoder
