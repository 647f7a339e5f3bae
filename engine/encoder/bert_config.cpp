// BertConfig::from_gguf: keys and tensor checks of a BERT encoder file.
#include "engine/encoder/bert_config.h"

#include "engine/gguf/gguf.h"
#include "kernels/cpu/matmul.h"

namespace pagoda::encoder {

namespace {

int read_size(const gguf::GgufFile& f, const std::string& key, bool required, int def = 0) {
  const auto v = f.get_int(key);
  if (!v) {
    if (required) throw EncoderError("encoder model has no " + key);
    return def;
  }
  if (*v <= 0 || *v > (int64_t{1} << 30)) throw EncoderError(key + " = " + std::to_string(*v) + " is not a valid size");
  return static_cast<int>(*v);
}

// The tensor `name` with ggml dims {cols, rows} (rows 0: a vector of cols); `matrix` tensors
// may be of any type the CPU matmul reads, vectors must be F32.
WeightRef tensor(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows, bool matrix) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) throw EncoderError("encoder model lacks tensor " + name);
  const std::vector<int64_t> want = rows > 0 ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols};
  if (t->dims != want) {
    std::string got;
    for (int64_t d : t->dims) got += (got.empty() ? "" : " x ") + std::to_string(d);
    throw EncoderError("tensor " + name + " has shape [" + got + "], expected [" + std::to_string(cols) +
                       (rows > 0 ? " x " + std::to_string(rows) : "") + "]");
  }
  if (matrix ? !cpu::matmul_supports(t->type) : t->type != GgmlType::F32)
    throw EncoderError("tensor " + name + " has a type the encoder cannot read (" +
                       (matrix ? "matrices: F32, F16, BF16, quantized" : "vectors must be F32") + ")");
  return WeightRef{t->type, f.tensor_data(*t), rows > 0 ? rows : 1, cols};
}

// `name` as tensor() reads it when the file has it; an unset WeightRef when not.
WeightRef optional_tensor(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows, bool matrix) {
  return f.find_tensor(name) == nullptr ? WeightRef{} : tensor(f, name, cols, rows, matrix);
}

// The classification head of a rank-pooling file.
void read_rank_head(const gguf::GgufFile& f, BertConfig& c) {
  const int64_t d = c.dim;
  c.cls = optional_tensor(f, "cls.weight", d, d, true);
  c.cls_b = optional_tensor(f, "cls.bias", d, 0, false);
  const gguf::TensorInfo* out = f.find_tensor("cls.output.weight");
  if (out != nullptr) {
    if (out->dims.size() != 2 || out->dims[1] <= 0 || out->dims[1] > 4096)
      throw EncoderError("tensor cls.output.weight must be [dim x labels]");
    c.n_cls_out = static_cast<int>(out->dims[1]);
    c.cls_out = tensor(f, "cls.output.weight", d, c.n_cls_out, true);
    c.cls_out_b = optional_tensor(f, "cls.output.bias", c.n_cls_out, 0, false);
  } else {
    c.n_cls_out = d;
  }
  if (c.cls.data == nullptr && c.cls_out.data == nullptr)
    throw EncoderError("pooling_type 4 (rank) needs a classification head: cls.weight or cls.output.weight");
}

}  // namespace

bool BertConfig::is_encoder(const gguf::GgufFile& file) {
  const std::string arch = file.get_string("general.architecture").value_or("");
  return arch == "bert" || arch == "nomic-bert";
}

BertConfig BertConfig::from_gguf(const gguf::GgufFile& f) {
  const std::string arch = f.get_string("general.architecture").value_or("");
  if (!is_encoder(f))
    throw EncoderError("not an encoder (general.architecture \"" + arch + "\"; supported: bert, nomic-bert)");
  BertConfig c;
  c.arch = arch == "bert" ? EncoderArch::Bert : EncoderArch::NomicBert;
  const bool nomic = c.arch == EncoderArch::NomicBert;
  const std::string k = arch + ".";
  c.name = f.get_string("general.name").value_or(f.path());
  c.n_layers = read_size(f, k + "block_count", true);
  c.dim = read_size(f, k + "embedding_length", true);
  c.ff_dim = read_size(f, k + "feed_forward_length", true);
  c.n_heads = read_size(f, k + "attention.head_count", true);
  c.ctx = read_size(f, k + "context_length", true);
  if (c.dim % c.n_heads != 0) throw EncoderError(k + "attention.head_count does not divide the embedding length");
  if (nomic && (c.dim / c.n_heads) % 2 != 0) throw EncoderError("nomic-bert needs an even head width for its rotary positions");
  c.eps = static_cast<float>(f.get_float(k + "attention.layer_norm_epsilon").value_or(1e-12));
  c.rope_freq_base = static_cast<float>(f.get_float(k + "rope.freq_base").value_or(1000.0));
  const int64_t pooling = f.get_int(k + "pooling_type").value_or(1);
  if (pooling != 1 && pooling != 2 && pooling != 4)
    throw EncoderError(k + "pooling_type " + std::to_string(pooling) + " is not supported (1 mean, 2 CLS, 4 rank)");
  c.pooling = static_cast<Pooling>(pooling);
  if (f.get_bool(k + "attention.causal").value_or(false))
    throw EncoderError(k + "attention.causal is set: a causal encoder is not supported");

  const gguf::TensorInfo* te = f.find_tensor("token_embd.weight");
  if (te == nullptr || te->dims.size() != 2) throw EncoderError("encoder model lacks a 2-D token_embd.weight");
  c.vocab_size = static_cast<int>(te->dims[1]);
  const gguf::TensorInfo* tt = f.find_tensor("token_types.weight");
  if (tt == nullptr || tt->dims.size() != 2) throw EncoderError("encoder model lacks a 2-D token_types.weight");
  c.n_types = static_cast<int>(tt->dims[1]);
  const int64_t d = c.dim, ff = c.ff_dim;
  c.tok_embd = tensor(f, "token_embd.weight", d, c.vocab_size, true);
  c.type_embd = tensor(f, "token_types.weight", d, c.n_types, true);  // any type the matmul reads
  if (!nomic) c.pos_embd = tensor(f, "position_embd.weight", d, c.ctx, true);
  c.embd_norm = tensor(f, "token_embd_norm.weight", d, 0, false);
  c.embd_norm_b = tensor(f, "token_embd_norm.bias", d, 0, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto m = [&](const char* n, int64_t cols, int64_t rows) { return tensor(f, p + n + ".weight", cols, rows, true); };
    auto v = [&](const char* n, const char* part, int64_t len) { return tensor(f, p + n + part, len, 0, false); };
    BertLayer L;
    if (nomic) {
      L.qkv = m("attn_qkv", d, 3 * d);
      L.o = m("attn_output", d, d);
      L.gate = m("ffn_gate", d, ff);
      L.up = m("ffn_up", d, ff);
      L.down = m("ffn_down", ff, d);
    } else {
      L.q = m("attn_q", d, d), L.q_b = v("attn_q", ".bias", d);
      L.k = m("attn_k", d, d), L.k_b = v("attn_k", ".bias", d);
      L.v = m("attn_v", d, d), L.v_b = v("attn_v", ".bias", d);
      L.o = m("attn_output", d, d), L.o_b = v("attn_output", ".bias", d);
      L.up = m("ffn_up", d, ff), L.up_b = v("ffn_up", ".bias", ff);
      L.down = m("ffn_down", ff, d), L.down_b = v("ffn_down", ".bias", d);
    }
    L.attn_norm = v("attn_output_norm", ".weight", d), L.attn_norm_b = v("attn_output_norm", ".bias", d);
    L.out_norm = v("layer_output_norm", ".weight", d), L.out_norm_b = v("layer_output_norm", ".bias", d);
    c.layers.push_back(L);
  }
  if (c.pooling == Pooling::Rank) read_rank_head(f, c);
  return c;
}

}  // namespace pagoda::encoder
